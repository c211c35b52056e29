"""Aggregating compare answers into tables, and writing them as JSON, Markdown, HTML and PNG plots."""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path
from typing import Any, Sequence

from icr2_components.evaluation.answer_match import answer_match
from icr2_components.evaluation.bcu import bcu, faithfulness, memory_bcu, pareto_front
from icr2_components.evaluation.external_metrics import external_scores
from icr2_components.evaluation.position_curves import curve_html, curve_markdown, curve_rows, position_curves
from icr2_components.evaluation.proportions import paired_outcomes, wilson_interval
from icr2_components.plotting import plot_context_types, plot_pareto, plot_position_curves
from icr2_components.evaluation.text_metrics import answer_scores, in_context_recall

# rouge_l_ragas: ragas' stemmed ROUGE-L beside ours (None where ragas cannot be imported)
ANSWER_METRICS = ("exact_match", "answer_match", "token_f1", "rouge_l", "rouge_l_ragas")
TABLE_COLUMNS = ANSWER_METRICS + ("bcu", "in_context_recall", "latency_s", "prompt_tokens")
CI_KEY = "answer_match_ci95"  # Wilson 95% interval of the answer match rate, [low, high]


def memory_answers(records: Sequence[dict], no_context_pipelines: set[str]) -> dict[str, str]:
    """question id -> the closed-book (no-context) pipeline's answer: the memory answer t_M of CUB."""
    memory = {}
    for record in records:
        if record["pipeline"] in no_context_pipelines and not record.get("error"):
            memory.setdefault(record["question_id"], record["answer"])
    return memory


def record_bcu(record: dict, memory: dict[str, str]) -> float | None:
    """BCU of one answer (None for the open context type or when the target is unknown)."""
    kind = record["context_type"]
    if kind == "gold":
        return bcu(record["answer"], record["answers"])
    if kind == "conflicting":
        return bcu(record["answer"], [record["conflicting_answer"]]) if record.get("conflicting_answer") else None
    if kind == "irrelevant":
        if record["question_id"] in memory:
            return memory_bcu(record["answer"], memory[record["question_id"]])
        return bcu(record["answer"], record["answers"])
    return None


def score_record(record: dict, memory: dict[str, str], external: dict[str, float] | None = None
                 ) -> dict[str, float | None]:
    """Every per-answer number the report averages; ``external`` (Haystack/ragas scores) overrides ours."""
    scores: dict[str, float | None] = dict(answer_scores(record["answer"], record["answers"]))
    scores["rouge_l_ragas"] = None
    scores.update(external or {})
    scores["bcu"] = record_bcu(record, memory)
    recall = None
    if record["context_type"] == "open" and record.get("shown_ids") is not None and record.get("selects_passages"):
        recall = in_context_recall(record["shown_ids"], record.get("gold_ids") or [])
    scores["in_context_recall"] = recall
    scores["latency_s"] = record.get("latency_s")
    scores["prompt_tokens"] = record.get("prompt_tokens")
    return scores


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def paired_tests(records: Sequence[dict], baselines: Sequence[str], pipelines: Sequence[str],
                 context_types: Sequence[str]) -> list[dict[str, Any]]:
    """Answer match of each pipeline against each baseline (the no-context pipelines) on the questions both
    answered without error, per context type: the paired counts and the exact McNemar p-value (unadjusted)."""
    matched: dict[tuple[str, str], dict[str, bool]] = {}
    for record in records:
        if not record.get("error"):
            key = (record["pipeline"], record["context_type"])
            matched.setdefault(key, {})[record["question_id"]] = answer_match(record["answer"], record["answers"])
    tests = []
    for baseline in baselines:
        for name in pipelines:
            if name == baseline:
                continue
            for kind in context_types:
                a, b = matched.get((name, kind), {}), matched.get((baseline, kind), {})
                common = [q for q in a if q in b]
                if common:
                    outcome = paired_outcomes([a[q] for q in common], [b[q] for q in common])
                    tests.append({"pipeline": name, "baseline": baseline, "context_type": kind,
                                  "metric": "answer_match", **outcome})
    return tests


def build_report(records: Sequence[dict], specs: Sequence[Any], context_types: Sequence[str]) -> dict[str, Any]:
    """``summary[pipeline][context_type][metric]`` means (answer match with its Wilson 95% interval,
    ``answer_match_ci95``), ``cub[pipeline]`` faithfulness/robustness, Pareto front, ``paired_tests`` (answer match
    against the closed-book pipelines, exact McNemar), ``position_curves`` (accuracy by gold passage position) and
    ``metric_implementations`` (who computed what)."""
    no_context = {s.name for s in specs if s.context_input is None}
    memory = memory_answers(records, no_context)
    answered = [r for r in records if not r.get("error")]
    external, implementations = external_scores(answered)
    external_by_record = {id(r): scores for r, scores in zip(answered, external)}
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in specs:
        summary[spec.name] = {}
        for kind in context_types:
            chosen = [r for r in records if r["pipeline"] == spec.name and r["context_type"] == kind]
            valid = [r for r in chosen if not r.get("error")]
            scores = [score_record(r, memory, external_by_record.get(id(r))) for r in valid]
            row = {metric: _mean([s[metric] for s in scores]) for metric in TABLE_COLUMNS}
            row["n"] = len(valid)
            matches = sum(1 for score in scores if score["answer_match"] == 1.0)
            row[CI_KEY] = list(wilson_interval(matches, len(valid))) if valid else None
            row["errors"] = len(chosen) - len(valid)
            summary[spec.name][kind] = row
    cub = {}
    for name, rows in summary.items():
        gold, conflicting, irrelevant = (rows.get(k, {}).get("bcu") for k in ("gold", "conflicting", "irrelevant"))
        cub[name] = {"faithfulness": faithfulness(gold, conflicting), "robustness": irrelevant}
    points = {n: (v["faithfulness"], v["robustness"]) for n, v in cub.items()
              if v["faithfulness"] is not None and v["robustness"] is not None}
    return {
        "summary": summary,
        "cub": cub,
        "pareto_front": pareto_front(points),
        "memory_target": "closed-book answer" if memory else "gold answers (no closed-book pipeline in the run)",
        "metric_implementations": implementations,
        "paired_tests": paired_tests(records, [s.name for s in specs if s.name in no_context],
                                     [s.name for s in specs], context_types),
        "position_curves": position_curves(records, [s.name for s in specs]),
    }


def _fmt(value: Any, metric: str = "") -> str:
    if value is None:
        return "-"
    if metric in ("latency_s",):
        return f"{value:.2f}"
    if metric in ("prompt_tokens", "n", "errors"):
        return f"{value:.0f}"
    return f"{value:.3f}"


def format_interval(interval: Sequence[float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"


def summary_rows(report: dict, metrics: Sequence[str] = TABLE_COLUMNS) -> tuple[list[str], list[list[str]]]:
    """One row per pipeline and context type; the answer match's 95% interval follows it when it is shown."""
    columns: list[str] = []
    for metric in metrics:
        columns.append(metric)
        if metric == "answer_match":
            columns.append(CI_KEY)
    header = ["pipeline", "context", "n", *("answer_match 95% CI" if c == CI_KEY else c for c in columns)]
    rows = []
    for name, per_type in report["summary"].items():
        for kind, row in per_type.items():
            rows.append([name, kind, _fmt(row["n"], "n"),
                         *(format_interval(row.get(c)) if c == CI_KEY else _fmt(row[c], c) for c in columns)])
    return header, rows


def paired_rows(report: dict, context_types: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """The paired answer-match tests against the closed-book baseline(s) (optionally only some context types)."""
    header = ["pipeline", "vs", "context", "n", "both right", "only pipeline", "only vs", "neither", "McNemar p"]
    rows = [[t["pipeline"], t["baseline"], t["context_type"], str(t["n"]), str(t["both"]), str(t["only_a"]),
             str(t["only_b"]), str(t["neither"]), format_p_value(t["p_value"])]
            for t in report.get("paired_tests", []) if context_types is None or t["context_type"] in context_types]
    return header, rows


def format_p_value(p_value: float) -> str:
    return "<0.0001" if p_value < 1e-4 else f"{p_value:.4f}"


def cub_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    header = ["pipeline", "faithfulness", "robustness", "on Pareto front"]
    rows = [[name, _fmt(v["faithfulness"]), _fmt(v["robustness"]), "yes" if name in report["pareto_front"] else ""]
            for name, v in report["cub"].items()]
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(report: dict, out_dir: str | Path) -> dict[str, str]:
    """Write report.json, report.md, report.html and the PNGs (pareto, context types, position curves); returns paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "report.json", "markdown": out / "report.md", "html": out / "report.html",
             "context_types_png": out / "context_types.png"}
    has_pareto = plot_pareto(report, out / "pareto.png")
    if has_pareto:
        files["pareto_png"] = out / "pareto.png"
    plot_context_types(report, files["context_types_png"])
    curves = report.get("position_curves")
    has_curves = bool(curves) and plot_position_curves(curves, out / "position_curves.png")
    if has_curves:
        files["position_curves_png"] = out / "position_curves.png"
    report["files"] = {k: str(v) for k, v in files.items()}
    files["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False))
    s_header, s_rows = summary_rows(report)
    c_header, c_rows = cub_rows(report)
    p_header, p_rows = paired_rows(report)
    paired_note = ("Same questions, answer match; exact McNemar test on the questions where exactly one of the two is "
                   "right (two-sided, not adjusted for the number of tests). The 95% intervals above are Wilson "
                   "score intervals.")
    run = report.get("run", {})
    notes = [f"Dataset: `{run.get('dataset')}`, {run.get('questions')} questions; BCU memory target for irrelevant "
             f"context: {report['memory_target']}.",
             f"Dataset skips: {json.dumps((run.get('dataset_skips') or {}).get('counts', {}))}; contexts not built: "
             f"{json.dumps(run.get('missing_contexts', {}))}; model runs {json.dumps(run.get('counters', {}))}."]
    md = ["# icr2 compare", "", *notes, "", "## Per pipeline and context type", "", markdown_table(s_header, s_rows),
          ""]
    if p_rows:
        md += ["## Paired answer match against closed-book", "", paired_note, "", markdown_table(p_header, p_rows), ""]
    md += ["## Faithfulness and robustness (CUB BCU)", "", markdown_table(c_header, c_rows), ""]
    if has_pareto:
        md += ["![Pareto](pareto.png)", ""]
    md += ["![Answer match by context type](context_types.png)", ""]
    if curves:
        md += curve_markdown(curves, markdown_table(*curve_rows(curves)), has_curves)
    implementations = report.get("metric_implementations", {})
    md += ["## Metric implementations", "", *(f"- `{k}`: {v}" for k, v in implementations.items()), ""]
    files["markdown"].write_text("\n".join(md))
    page = ["<!doctype html><html><head><meta charset='utf-8'><title>icr2 compare</title>",
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:3px 8px}</style></head><body><h1>icr2 compare</h1>",
            *(f"<p>{html.escape(n)}</p>" for n in notes), "<h2>Per pipeline and context type</h2>",
            html_table(s_header, s_rows)]
    if p_rows:
        page += ["<h2>Paired answer match against closed-book</h2>", f"<p>{html.escape(paired_note)}</p>",
                 html_table(p_header, p_rows)]
    page += ["<h2>Faithfulness and robustness (CUB BCU)</h2>", html_table(c_header, c_rows)]
    if has_pareto:
        page.append("<p><img src='pareto.png' alt='Pareto plot'></p>")
    page.append("<p><img src='context_types.png' alt='answer match by context type'></p>")
    if curves:
        page += curve_html(curves, html_table(*curve_rows(curves)), has_curves)
    page += ["<h2>Metric implementations</h2>", "<ul>",
             *(f"<li><code>{html.escape(k)}</code>: {html.escape(v)}</li>" for k, v in implementations.items()),
             "</ul></body></html>"]
    files["html"].write_text("\n".join(page))
    return {k: str(v) for k, v in files.items()}
