"""Rendering a compare report (``compare_report.build_report``) as tables: CLI rows, Markdown, HTML and PNGs.

Kept apart from building the report so the statistics and their presentation can change separately. Every cell
shows its 95% interval: ``mean [low, high]``; paired rows show the difference, the exact test, Holm's adjusted p,
the smallest detectable difference and the verdict.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icr2_components.evaluation.reports.compare_report import STRUCTURAL_REASONS, TABLE_COLUMNS
from icr2_components.evaluation.reports.position_curves import curve_html, curve_markdown, curve_rows, shape_rows
from icr2_components.evaluation.statistics.intervals import format_interval
from icr2_components.evaluation.statistics.paired_comparison import ALPHA, POWER, format_amount
from icr2_components.plotting import plot_context_types, plot_pareto, plot_position_curves


def _decimals(metric: str) -> tuple[int, int]:
    """(mean, bound) decimals of a metric in the tables."""
    if metric == "prompt_tokens":
        return 0, 0
    if metric == "latency_s":
        return 2, 2
    return 3, 2


def _fmt(value: Any, metric: str = "") -> str:
    if value is None:
        return "-"
    if metric in ("latency_s",):
        return f"{value:.2f}"
    if metric in ("prompt_tokens", "n", "errors"):
        return f"{value:.0f}"
    return f"{value:.3f}"


def format_metric(row: dict, metric: str) -> str:
    """A summary cell: ``mean [low, high]`` (the mean alone for a row without intervals)."""
    value = (row.get("intervals") or {}).get(metric)
    if value is None:
        return _fmt(row.get(metric), metric)
    return format_interval(value, *_decimals(metric))


def format_difference(value: dict | None, metric: str) -> str:
    """A paired difference: ``+0.150 [+0.05, +0.25]``."""
    if not value or value.get("mean") is None:
        return "-"
    mean_decimals, bound_decimals = _decimals(metric)
    text = f"{value['mean']:+.{mean_decimals}f}"
    if value.get("ci95") is None:
        return f"{text} [n={value['n']}]"
    low, high = value["ci95"]
    return f"{text} [{low:+.{bound_decimals}f}, {high:+.{bound_decimals}f}]"


def shown_columns(report: dict, metrics: Sequence[str] = TABLE_COLUMNS) -> list[str]:
    """``metrics`` without the columns the report leaves out of its tables (``omitted_columns``: e.g. exact match
    when the reader answers in sentences)."""
    omitted = report.get("omitted_columns") or {}
    return [m for m in metrics if m not in omitted]


def summary_cell(row: dict, metric: str) -> str:
    """``mean [95% interval]``, with ``n=k`` where the metric was computed on fewer answers than the row's n (a
    question set's questions without answers or gold passage ids)."""
    text = format_metric(row, metric)
    n = ((row.get("intervals") or {}).get(metric) or {}).get("n")
    if text != "-" and n is not None and n != row.get("n"):
        text += f" n={n}"
    return text


def summary_rows(report: dict, metrics: Sequence[str] = TABLE_COLUMNS) -> tuple[list[str], list[list[str]]]:
    """One row per pipeline and context type; each metric cell is ``mean [95% interval]`` (``n=k`` after it when
    computed on fewer than the row's n answers; the coverage table says why)."""
    metrics = shown_columns(report, metrics)
    header = ["pipeline", "context", "n", *metrics]
    rows = []
    for name, per_type in report["summary"].items():
        for kind, row in per_type.items():
            rows.append([name, kind, _fmt(row["n"], "n"), *(summary_cell(row, m) for m in metrics)])
    return header, rows


def coverage_rows(report: dict, metrics: Sequence[str] = TABLE_COLUMNS) -> tuple[list[str], list[list[str]]]:
    """Each metric not computed on every question of the run, and why (reasons that hold by definition, such as
    BCU under the open context, are left to report.json): one row per context type, pipelines and reasons, naming
    the metrics it holds for ("every metric" when all)."""
    metrics = shown_columns(report, metrics)
    header = ["context", "metrics", "pipelines", "computed on", "not computed on (questions: why)"]
    names = list(report["summary"])
    by_metric: dict[tuple, list[str]] = {}
    for name, per_type in report["summary"].items():
        for kind, row in per_type.items():
            for metric in metrics:
                reasons = {k: v for k, v in ((row.get("not_computed") or {}).get(metric) or {}).items()
                           if k not in STRUCTURAL_REASONS}
                if reasons:
                    n = ((row.get("intervals") or {}).get(metric) or {}).get("n", 0)
                    key = (metric, kind, n, row.get("questions"), tuple(sorted(reasons.items())))
                    by_metric.setdefault(key, []).append(name)
    grouped: dict[tuple, list[str]] = {}
    for (metric, kind, n, questions, reasons), pipelines in by_metric.items():
        grouped.setdefault((kind, tuple(pipelines), n, questions, reasons), []).append(metric)
    kinds = [k for per_type in report["summary"].values() for k in per_type]
    rows = []
    for (kind, pipelines, n, questions, reasons), chosen in sorted(
            grouped.items(), key=lambda item: (kinds.index(item[0][0]), metrics.index(item[1][0]))):
        rows.append([kind, "every metric" if len(chosen) == len(metrics) else ", ".join(chosen),
                     "all" if len(pipelines) == len(names) > 1 else ", ".join(pipelines), f"{n} of {questions}",
                     "; ".join(f"{count}: {reason}" for reason, count in reasons)])
    return header, rows


def paired_rows(report: dict, metrics: Sequence[str] | None = None, context_types: Sequence[str] | None = None
                ) -> tuple[list[str], list[list[str]]]:
    """The paired comparisons with the baseline (optionally only some metrics and context types), by metric."""
    header = ["pipeline", "vs", "context", "metric", "n", "difference [95% CI]", "only pipeline / only vs", "test",
              "p", "Holm p", "MDE", "verdict"]
    comparisons = (report.get("paired") or {}).get("comparisons", [])
    order = shown_columns(report, metrics or TABLE_COLUMNS)
    chosen = [c for c in comparisons if c["metric"] in order
              and (context_types is None or c["context_type"] in context_types)]
    chosen.sort(key=lambda c: order.index(c["metric"]))  # stable: context types and pipelines keep their order
    rows = []
    for c in chosen:
        discordant = f"{c['only_pipeline']} / {c['only_baseline']}" if "only_pipeline" in c else "-"
        rows.append([c["pipeline"], c["baseline"], c["context_type"], c["metric"], str(c["n"]),
                     format_difference(c["difference"], c["metric"]), discordant, c["test"],
                     format_p_value(c["p_value"]), format_p_value(c["p_holm"]),
                     "-" if c["mde"] is None else format_amount(c["mde"]), c["verdict"]])
    return header, rows


def gap_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """The share of the baseline -> oracle gap each pipeline closes (answer match, open context)."""
    section = (report.get("paired") or {}).get("gap_closed") or {}
    header = ["pipeline", "n", "gap closed [95% CI]", "significant after Holm"]
    rows = []
    for r in section.get("results", []):
        if r["mean"] is None:
            value = r["method"]
        elif r["ci95"] is None:
            value = f"{r['mean']:.2f} [{r['method']}]"
        else:
            value = f"{r['mean']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
        rows.append([r["pipeline"], str(r["n"]), value, "yes" if r["significant_after_holm"] else "no"])
    return header, rows


def format_p_value(p_value: float) -> str:
    return "<0.0001" if p_value < 1e-4 else f"{p_value:.4f}"


def cub_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Faithfulness and robustness with their intervals, and where each pipeline stands to the Pareto front."""
    header = ["pipeline", "faithfulness [95% CI]", "robustness [95% CI]", "Pareto front"]
    status = report.get("pareto_status") or {}
    rows = []
    for name, v in report["cub"].items():
        intervals = v.get("intervals") or {}
        cells = [format_interval(intervals[k]) if k in intervals else _fmt(v[k])
                 for k in ("faithfulness", "robustness")]
        front = status.get(name, "on front" if name in report["pareto_front"] else "")
        rows.append([name, *cells, front])
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def report_notes(report: dict) -> dict[str, str]:
    """The sentences that say how to read each section."""
    stats = report.get("statistics", {})
    paired = report.get("paired") or {}
    gap = paired.get("gap_closed") or {}
    return {
        "summary": (f"Each cell: mean [95% interval]. Intervals: Wilson for 0/1 scores (EM, answer match, BCU), a "
                    f"BCa bootstrap over questions otherwise ({stats.get('bootstrap_resamples')} resamples, seed "
                    f"{stats.get('seed')}); see `statistics` in report.json. Pipelines are listed in the order given, "
                    f"not ranked."
                    + "".join(f" Left out of the tables: {name}, {why}." for name, why in
                              (report.get("omitted_columns") or {}).items())),
        "paired": (f"Every pipeline against the baseline `{paired.get('baseline')}` on the questions both answered "
                   f"(n). Difference = pipeline - baseline, with its paired bootstrap 95% interval. Test: exact "
                   f"McNemar on the discordant pairs for 0/1 scores, a paired sign-flip permutation test otherwise. "
                   f"Holm p: adjusted {paired.get('holm_family')}. MDE: the difference detectable with power "
                   f"{POWER:.0%} at alpha {ALPHA} / m (two-sided), {stats.get('mde')}. A verdict other than "
                   f"better/worse (higher/lower for costs) means the run cannot tell the two apart: it does not rank "
                   f"them."),
        "gap": (f"Share of the {paired.get('baseline')} -> {gap.get('oracle')} gap in answer match closed "
                f"({gap.get('context_type')} context, the questions all three answered): (pipeline - baseline) / "
                f"(oracle - baseline), percentile bootstrap interval."),
        "coverage": ("Each metric is computed on the questions that have its inputs: answer metrics need gold "
                     "answers, in-context recall gold passage ids the index holds, CUB's contexts (gold, "
                     "conflicting, irrelevant) a gold answer and a gold passage that contains it. Below: every "
                     "metric computed on fewer than the run's questions, on how many, and why not on the others "
                     "(by definition BCU is not scored under the open context nor recall under controlled ones: "
                     "those are only in report.json, summary.*.*.not_computed)."),
        "coverage_full": ("Every metric was computed on every question of the run where it applies (BCU under CUB's "
                          "contexts, in-context recall under open for pipelines that choose passages)."),
        "cub": ("Faithfulness = mean(BCU gold, BCU conflicting), its interval a bootstrap resampling questions "
                "jointly over both context types; robustness = BCU irrelevant (Wilson). Off the Pareto front: "
                "'dominated by' when a dominating front pipeline's interval lies entirely above on some axis, "
                "else 'within noise of' (not clearly dominated)."),
    }


def report_sections(report: dict) -> list[tuple[int, str, str | None, tuple[list[str], list[list[str]]] | None]]:
    """The report's sections in order, as ``(level, title, note, (header, rows) or None)``, for Markdown and HTML."""
    notes = report_notes(report)
    sections: list[tuple[int, str, str | None, tuple[list[str], list[list[str]]] | None]] = [
        (2, "Per pipeline and context type", notes["summary"], summary_rows(report))]
    coverage = coverage_rows(report)
    sections.append((2, "Metric coverage", notes["coverage"] if coverage[1] else notes["coverage_full"],
                     coverage if coverage[1] else None))
    paired = report.get("paired") or {}
    if paired.get("comparisons"):
        sections.append((2, f"Paired comparison with the baseline `{paired['baseline']}`", notes["paired"], None))
        for metric in shown_columns(report):
            header, rows = paired_rows(report, metrics=[metric])
            if rows:
                sections.append((3, metric, None, (header, rows)))
        gap = paired.get("gap_closed") or {}
        if gap.get("results"):
            sections.append((3, "Gap closed toward the oracle", notes["gap"], gap_rows(report)))
        elif gap.get("note"):
            sections.append((3, "Gap closed toward the oracle", f"Not computed: {gap['note']}.", None))
    sections.append((2, "Faithfulness and robustness (CUB BCU)", notes["cub"], cub_rows(report)))
    sections += judge_sections(report)
    return sections


def judge_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """The judge metrics (``report["judge"]``): per pipeline and context type, each metric's ``mean [95% CI]``,
    its n, and the judgements not scored (unparsable replies, failed requests)."""
    judge = report.get("judge") or {}
    metrics = list(judge.get("metrics") or {})
    header = ["pipeline", "context", *(f"{m} [95% CI]" for m in metrics), *(f"{m} n (unparsable)" for m in metrics)]
    rows = []
    for name, per_type in (judge.get("summary") or {}).items():
        for kind, cells in per_type.items():
            counts = [f"{cells[m]['n']} ({cells[m]['unparsable']}" + (f", {cells[m]['failed']} failed)"
                                                                      if cells[m].get("failed") else ")")
                      for m in metrics]
            rows.append([name, kind, *(format_interval(cells[m]) for m in metrics), *counts])
    return header, rows


def judge_sections(report: dict) -> list[tuple[int, str, str | None, tuple[list[str], list[list[str]]] | None]]:
    """The judge's sections (none without ``--judge``): its metrics with intervals and n, and the paired tests."""
    judge = report.get("judge")
    if not judge:
        return []
    measures = "; ".join(f"{m}: {v['measures']}" for m, v in judge["metrics"].items())
    not_judged = "; ".join(f"{m}: " + ", ".join(f"{c} {why}" for why, c in reasons.items())
                           for m, reasons in (judge.get("not_judged") or {}).items())
    note = (f"Judge: {judge['judge']} (judge hash {judge['judge_hash']}), through ragas. {measures}. Each cell: mean "
            f"[95% interval] over the answers judged (n); an unparsable reply (no score ragas could read) is counted, "
            f"never scored, as is a failed request. Unparsable in all: {json.dumps(judge.get('unparsable'))}."
            + (f" Not judged (inputs missing): {not_judged}." if not_judged else ""))
    sections = [(2, "Judged without gold labels", note, judge_rows(report))]
    paired = {"paired": judge.get("paired") or {}}
    for metric in judge["metrics"]:
        header, rows = paired_rows(paired, metrics=[metric])
        if rows:
            sections.append((3, f"{metric} against `{paired['paired'].get('baseline')}` (paired)", None,
                             (header, rows)))
    return sections


def statistics_lines(report: dict) -> list[str]:
    stats = report.get("statistics") or {}
    return [f"Confidence {stats.get('confidence')}; seed {stats.get('seed')}; bootstrap resamples "
            f"{stats.get('bootstrap_resamples')}; sign-flip permutations {stats.get('permutation_resamples')}; "
            f"Monte Carlo tables {stats.get('monte_carlo_tables')}.",
            f"Intervals: {stats.get('interval_rule')}.", f"Paired tests: {stats.get('paired_tests')}.",
            f"MDE: {stats.get('mde')}."]


def question_set_lines(described: dict | None) -> list[str]:
    """What the report says of a question set: its format and field mapping, and how many of the run's questions
    have answers, gold passages and a conflicting answer (none for a KILT or ICR2 file)."""
    if not described or "fields" not in described:
        return []
    counts = described.get("run_questions") or {}
    line = (f"Question set ({described['format']}, fields {json.dumps(described['fields'])}): of "
            f"{counts.get('questions')} questions, {counts.get('with_answers')} have gold answers, "
            f"{counts.get('with_gold_passages')} gold passages in the index"
            + (f" ({counts['with_gold_sources']} name gold sources)" if counts.get("with_gold_sources") else "")
            + f", {counts.get('with_conflicting_answer')} a conflicting answer of their own.")
    if described.get("gold_passage_ids_not_in_index"):
        line += (f" {described['gold_passage_ids_not_in_index']} gold passage id(s) are not in the index (e.g. "
                 f"{', '.join(described['gold_passage_ids_not_in_index_examples'][:3])}).")
    return [line]


def dataset_fingerprint(run: dict) -> str:
    """What a report says after the dataset's path: its SHA-256 (the question set whose gold labels scored every
    answer, cached or new) and how many cached answers were written with other labels; empty for a report from
    before the run recorded the SHA-256."""
    sha = run.get("dataset_sha256")
    if not sha:
        return ""
    changed = (run.get("counters") or {}).get("labels_changed")
    return (f" (SHA-256 `{sha}`; every answer scored with this file's gold labels"
            + (f", {changed} cached answer(s) written with other labels re-scored" if changed else "") + ")")


def write_report(report: dict, out_dir: str | Path) -> dict[str, str]:
    """Write report.json, report.md, report.html and the PNGs (pareto, context types, position curves); returns
    paths."""
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
    run = report.get("run", {})
    notes = [f"Dataset: `{run.get('dataset')}`{dataset_fingerprint(run)}, {run.get('questions')} questions; BCU "
             f"memory target for irrelevant context: {report['memory_target']}.",
             f"Dataset skips: {json.dumps((run.get('dataset_skips') or {}).get('counts', {}))}; contexts not built: "
             f"{json.dumps(run.get('missing_contexts', {}))}; model runs {json.dumps(run.get('counters', {}))}.",
             *question_set_lines(run.get("question_set"))]
    sections = report_sections(report)
    md = ["# icr2 compare", "", *notes, ""]
    page = ["<!doctype html><html><head><meta charset='utf-8'><title>icr2 compare</title>",
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:3px 8px}</style></head><body><h1>icr2 compare</h1>",
            *(f"<p>{html.escape(n)}</p>" for n in notes)]
    for level, title, note, table in sections:
        md += ["#" * level + " " + title, ""]
        page.append(f"<h{level}>{html.escape(title).replace('`', '')}</h{level}>")
        if note:
            md += [note, ""]
            page.append(f"<p>{html.escape(note)}</p>")
        if table:
            md += [markdown_table(*table), ""]
            page.append(html_table(*table))
    if has_pareto:
        md += ["![Pareto](pareto.png)", ""]
        page.append("<p><img src='pareto.png' alt='Pareto plot'></p>")
    md += ["![Answer match by context type](context_types.png)", ""]
    page.append("<p><img src='context_types.png' alt='answer match by context type'></p>")
    if curves:
        md += curve_markdown(curves, markdown_table(*curve_rows(curves)), has_curves,
                             markdown_table(*shape_rows(curves)))
        page += curve_html(curves, html_table(*curve_rows(curves)), has_curves, html_table(*shape_rows(curves)))
    implementations = report.get("metric_implementations", {})
    md += ["## Metric implementations", "", *(f"- `{k}`: {v}" for k, v in implementations.items()), ""]
    md += ["## Statistics", "", *(f"- {line}" for line in statistics_lines(report)), ""]
    files["markdown"].write_text("\n".join(md))
    page += ["<h2>Metric implementations</h2>", "<ul>",
             *(f"<li><code>{html.escape(k)}</code>: {html.escape(v)}</li>" for k, v in implementations.items()),
             "</ul>", "<h2>Statistics</h2>", "<ul>",
             *(f"<li>{html.escape(line)}</li>" for line in statistics_lines(report)), "</ul></body></html>"]
    files["html"].write_text("\n".join(page))
    return {k: str(v) for k, v in files.items()}
