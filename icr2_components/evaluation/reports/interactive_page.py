"""The interactive page of a run (``explore.html``): the report's statistics joined to every question, every answer
and every passage, in one self-contained page that opens from disk with no network.

``icr2 compare``, ``icr2 reproduce`` and ``icr2 eval-gate --labels --out-dir`` write it beside their report
(``report.html`` stays the static page). The page is generated from the report's JSON and the run's answer records
(the answer cache; the label files for eval-gate): every number it shows is in the JSON it embeds. Python scores
each answer with the report's own scorers (``compare_report.score_record``, the experiment's ``score``, the gate's
``retrieve ? context_match : closed_book_match``); the browser only filters, sorts, pages and shows them. Each
paired comparison of the summary links to its discordant questions (right only with A, right only with B): the rows
the browser finds are the pairs McNemar's test counted, so their number equals ``only_pipeline`` / ``only_baseline``
of report.json (the browser test checks it).

Layout of the page: ``explore.html`` with the data (``<script type="application/json" id="page-data">``), the
script and the styles inline (``resources/explore``), and plotly's figures as plotly writes them (its JSON; hover:
mean, 95% interval, n), drawn by plotly.js once the question table is on screen; plotly.js is written beside the
page as ``plotly.min.js`` (4.8 MB: a file of the run folder, not inlined in each page).
Passages are stored once by id (a question's passages are shown to several pipelines).

Usage:
    >>> from icr2_components.evaluation.reports.interactive_page import write_page_for_run
    >>> write_page_for_run("bench/results/ab_cub", out_dir="/tmp/ab_cub_page")  # report.json + answer cache
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from icr2_components.evaluation.statistics.intervals import format_interval

PAGE_FILE = "explore.html"
PLOTLY_FILE = "plotly.min.js"
PAGE_SIZE = 50  # rows of the question table per page: the DOM holds one page, whatever the run's size
#: record fields the question panel shows in their own places; every other field is the technique's trace
SHOWN_FIELDS = {"key", "pipeline", "pipeline_file", "pipeline_hash", "question_id", "query", "answers", "gold_ids",
                "answer", "shown_ids", "shown_passages", "prompt_tokens", "latency_s", "record_sha", "context_sha",
                "task_type", "context_type", "prompt", "prompt_chars", "prompt_truncated", "trace", "trace_passages",
                "trace_passages_truncated"}


def _resource(name: str) -> str:
    return resources.files("icr2_components.resources").joinpath("explore", name).read_text(encoding="utf-8")


def _json_for_script(data: Any) -> str:
    """JSON safe inside ``<script>``: ``</`` and the line separators cannot end or break the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


class _Passages:
    """Passage texts stored once by id; a record's passages become a list of ids."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, ids: Sequence[str] | None, texts: Sequence[str] | None, prefix: str = "") -> list[str] | None:
        if ids is None and texts is None:
            return None
        ids = list(ids) if ids is not None else [f"{prefix}#{i + 1}" for i in range(len(texts or []))]
        for i, passage_id in enumerate(ids):
            if texts is not None and i < len(texts) and isinstance(texts[i], str):
                self.texts.setdefault(str(passage_id), texts[i])
        return [str(i) for i in ids]


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return round(value, 4) if isinstance(value, float) else value
    return None


def _trace(record: dict) -> dict[str, Any]:
    """What the record says of the technique beyond the answer (gold position, passages kept, errors, finish
    reason, a gate's decision, ...): every field not shown elsewhere, as it is."""
    return {k: v for k, v in record.items() if k not in SHOWN_FIELDS and v is not None}


def _cell(record: dict, scores: dict[str, Any], passages: _Passages, right: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {"a": record.get("answer") or "", "r": None if right is None else int(bool(right)),
                            "s": {k: _number(v) for k, v in scores.items() if _number(v) is not None},
                            "lat": _number(record.get("latency_s")), "tok": _number(record.get("prompt_tokens")),
                            "p": passages.add(record.get("shown_ids"), record.get("shown_passages"),
                                              prefix=str(record.get("key"))),
                            "t": _trace(record)}
    if isinstance(record.get("prompt"), str):
        cell["prompt"] = record["prompt"]
        if record.get("prompt_truncated"):  # the record kept the first part: the page says how long it was
            cell["promptChars"] = record.get("prompt_chars")
    if isinstance(record.get("trace"), dict) and record["trace"]:
        # what each technique did (component name -> its trace_record); the passages it names but the prompt did
        # not show are stored with the others, by id
        cell["tr"] = record["trace"]
        extra = record.get("trace_passages") or {}
        passages.add(list(extra), list(extra.values()))
    return cell


def _comparison(c: dict, a: str, b: str, cond: str | None, metric: str, only_a: int, only_b: int, section: str,
                **shown: str) -> dict[str, Any]:
    return {"a": a, "b": b, "cond": cond, "metric": metric, "onlyA": only_a, "onlyB": only_b, "section": section,
            "n": c.get("n"), **shown}


def _p(value: Any) -> str:
    if value is None:
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


# ---------------------------------------------------------------------------------------------------- compare


def _judgements(path: Path | None, judge_hash: str | None) -> dict[str, list[dict]]:
    """answer record key -> the judge's lines for it (value, unparsable, raw replies) of the report's judge."""
    from icr2_components.evaluation.compare.cache import read_answer_records, resolve_cache_path

    if path is None or judge_hash is None or not resolve_cache_path(path).is_file():
        return {}
    found: dict[str, list[dict]] = {}
    for line in read_answer_records(path):
        if line.get("judge_hash") != judge_hash:
            continue
        found.setdefault(line["answer_key"], []).append(
            {"metric": line.get("metric"), "value": line.get("value"), "unparsable": line.get("unparsable"),
             "error": line.get("error"), "replies": line.get("replies")})
    return found


def compare_page_data(report: dict, records: Iterable[dict], judgements_file: Path | None = None) -> dict[str, Any]:
    """The page's data of an ``icr2 compare`` report and its answer records: one row per question and context
    type, one cell per pipeline with every per-answer score of the report (``score_record``), and the paired
    comparisons with their discordant counts as report.json states them."""
    from icr2_components.evaluation.reports.compare_report import memory_answers, score_record
    from icr2_components.evaluation.reports.rendering import format_difference

    run = report.get("run") or {}
    names = list(report["summary"])
    by_hash = {info["hash"]: name for name, info in (run.get("pipelines") or {}).items()}
    wanted = set(run.get("question_ids") or [])
    kinds = list(run.get("context_types") or dict.fromkeys(k for v in report["summary"].values() for k in v))
    chosen: dict[tuple[str, str, str], dict] = {}
    for record in records:
        name = by_hash.get(record.get("pipeline_hash")) if by_hash else record.get("pipeline")
        if (name not in names or record.get("failed_request") or record.get("context_type") not in kinds
                or (wanted and record.get("question_id") not in wanted)):
            continue
        chosen[(name, record["question_id"], record["context_type"])] = {**record, "pipeline": name}
    kept = list(chosen.values())
    no_context = {r["pipeline"] for r in kept if r.get("reads_context") is False}
    memory = memory_answers(kept, no_context)
    judge = report.get("judge") or {}
    judged = _judgements(judgements_file, judge.get("judge_hash"))
    passages = _Passages()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in kept:
        key = (record["question_id"], record["context_type"])
        row = rows.setdefault(key, {"id": record["question_id"], "q": record.get("query") or "",
                                    "gold": record.get("answers") or [], "goldIds": record.get("gold_ids") or [],
                                    "cond": record["context_type"], "stats": 1, "cells": {}})
        scores = {} if record.get("error") else score_record(record, memory)
        cell = _cell(record, scores, passages, None if record.get("error") else scores.get("answer_match"))
        lines = judged.get(record.get("key"), [])
        if lines:
            cell["j"] = lines
            for line in lines:
                if line["value"] is not None and not line.get("unparsable"):
                    cell["s"][f"judge:{line['metric']}"] = _number(line["value"])
        if record.get("error"):
            cell["e"] = str(record["error"])
        row["cells"][record["pipeline"]] = cell
    comparisons = []
    for section, paired, prefix in (("paired", report.get("paired") or {}, ""),
                                    ("judge", judge.get("paired") or {}, "judge:")):
        for c in paired.get("comparisons", []):
            if "only_pipeline" not in c:
                continue  # not 0/1 scores: no discordant pairs
            comparisons.append(_comparison(
                c, c["pipeline"], c["baseline"], c["context_type"], prefix + c["metric"], c["only_pipeline"],
                c["only_baseline"], section, label=f"{c['pipeline']} vs {c['baseline']}",
                difference=format_difference(c.get("difference"), c["metric"]), test=c.get("test", ""),
                p=_p(c.get("p_value")), holm=_p(c.get("p_holm")), verdict=c.get("verdict", "")))
    metrics = list(dict.fromkeys(m for r in rows.values() for cell in r["cells"].values() for m in cell["s"]))
    return {"kind": "compare", "title": f"icr2 compare: {run.get('dataset', '')}", "columns": names,
            "condName": "context type", "conds": kinds, "headline": "answer_match", "metrics": metrics,
            "rows": list(rows.values()), "passages": passages.texts, "comparisons": comparisons,
            "baseline": (report.get("paired") or {}).get("baseline")}


def compare_tables(report: dict) -> list[tuple[str, str | None, tuple | None]]:
    """The static sections of a compare report (``rendering.report_sections``) but the paired tables, which the
    page shows with their discordant links."""
    from icr2_components.evaluation.reports.rendering import report_sections

    return [(title, note, table) for _, title, note, table in report_sections(report)
            if not (table and table[0][:2] == ["pipeline", "vs"])]


def _answer_match_points(labels: list, summaries: dict) -> tuple[list, list, list, list, list]:
    """x, mean, the interval's distances below and above it, and (low, high, n) for hovering: one point per label
    whose summary holds an answer-match mean (as report.json gives it; nothing computed here)."""
    xs, ys, low, high, custom = [], [], [], [], []
    for label in labels:
        value = ((summaries.get(label) or {}).get("intervals") or {}).get("answer_match") or {}
        if value.get("mean") is None:
            continue
        ci = value.get("ci95") or [value["mean"], value["mean"]]
        xs.append(label)
        ys.append(value["mean"])
        low.append(value["mean"] - ci[0])
        high.append(ci[1] - value["mean"])
        custom.append([ci[0], ci[1], value.get("n")])
    return xs, ys, low, high, custom


def compare_figures(report: dict) -> list[Any]:
    """Answer match per pipeline and context type with its interval; the position curves where the run has them."""
    import plotly.graph_objects as go

    figures = []
    bar = go.Figure()
    kinds = list(dict.fromkeys(k for v in report["summary"].values() for k in v))
    for name, per_type in report["summary"].items():
        xs, ys, low, high, custom = _answer_match_points(kinds, per_type)
        bar.add_bar(name=name, x=xs, y=ys, customdata=custom,
                    error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low},
                    hovertemplate=f"{name}<br>%{{x}}: %{{y:.3f}} [%{{customdata[0]:.2f}}, "
                                  "%{customdata[1]:.2f}]<br>n = %{customdata[2]}<extra></extra>")
    bar.update_layout(title="answer match per context type (95% interval)", barmode="group",
                      yaxis={"title": "answer match", "range": [0, 1]})
    figures.append(bar)
    curves = report.get("position_curves") or {}
    if curves.get("curves"):
        line = go.Figure()
        for name, buckets in curves["curves"].items():
            xs, ys, low, high, custom = _answer_match_points(curves.get("buckets", []), buckets)
            line.add_scatter(name=name, x=xs, y=ys, mode="lines+markers", customdata=custom,
                             error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low},
                             hovertemplate=f"{name}<br>gold at %{{x}}: %{{y:.3f}} [%{{customdata[0]:.2f}}, "
                                           "%{customdata[1]:.2f}]<br>n = %{customdata[2]}<extra></extra>")
        line.update_layout(title=f"answer match by gold passage position ({curves.get('context_type')} context)",
                           xaxis={"title": "gold passage position", "type": "category"},
                           yaxis={"title": "answer match", "range": [0, 1]})
        figures.append(line)
    return figures


# ---------------------------------------------------------------------------------------------------- reproduce


def reproduce_page_data(report: dict, records: Iterable[dict], reference_records: Iterable[dict],
                        experiment: Any) -> dict[str, Any]:
    """The page's data of an ``icr2 reproduce`` curve experiment: one row per question and condition, one cell per
    variant (scored with the experiment's ``score``, an error scored wrong, as the report does) and per reference
    (closed-book, oracle: the question's one answer, stored once in ``shared`` and shown in each of its condition
    rows); the paired comparisons of
    ``variants_vs_first`` and ``conditions_vs_references``. Only questions of ``questions.ids`` (answered under
    every condition and variant) count in the statistics (``stats``)."""
    from icr2_components.evaluation.experiments.protocol import split_question_id

    run = report.get("run") or {}
    conditions = {c["name"]: c for c in report.get("conditions", [])}
    complete = set((report.get("questions") or {}).get("ids") or [])
    variants = list(dict.fromkeys(c["variant"] for c in report.get("cells", [])))
    references = list(report.get("references") or {})
    pipelines = run.get("pipelines") or {}
    # a reference may share its hash with a variant (the oracle is the plain prompt given the gold passage only):
    # variants are named among the conditions' answers, references among the references' answers
    variant_of = {pipelines[n]["hash"]: n for n in variants if n in pipelines}
    reference_of = {pipelines[n]["hash"]: n for n in references if n in pipelines}
    passages = _Passages()

    def scored(record: dict) -> dict[str, Any]:
        right = not record.get("error") and bool(experiment.score(record.get("answer") or "", record["answers"]))
        cell = _cell(record, {"correct": right}, passages, right)
        if record.get("error"):
            cell["e"] = str(record["error"])
        return cell

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        name = variant_of.get(record.get("pipeline_hash"))
        if name is None or record.get("failed_request") or record.get("context_type") != "corpus":
            continue
        try:
            base, condition = split_question_id(record["question_id"])
        except ValueError:
            continue
        if condition not in conditions:
            continue
        info = conditions[condition]
        row = rows.setdefault((base, condition), {
            "id": base, "q": record.get("query") or "", "gold": record.get("answers") or [],
            "goldIds": record.get("gold_ids") or [], "cond": condition, "condLabel": info.get("label"),
            "group": info.get("group"), "x": info.get("x"), "stats": int(base in complete), "cells": {}})
        row["cells"][name] = scored(record)
    reference_cells: dict[str, dict[str, Any]] = {}
    for record in reference_records:
        name = reference_of.get(record.get("pipeline_hash"))
        if name is None or record.get("failed_request") or record.get("context_type") != "open":
            continue
        reference_cells.setdefault(record["question_id"], {})[name] = scored(record)
    comparisons = []
    for versus in report.get("variants_vs_first", []):
        for r in versus["rows"]:
            comparisons.append(_comparison(
                r, versus["variant"], versus["baseline"], r["condition"], "correct", r["only_variant"],
                r["only_baseline"], "variants", label=f"{versus['variant']} vs {versus['baseline']}",
                difference=f"{r['difference']:+.3f}", test=versus.get("test", ""), p=_p(r.get("p_value")),
                holm=_p(r.get("p_holm")), verdict=""))
    for family in report.get("conditions_vs_references", []):
        for r in family["rows"]:
            comparisons.append(_comparison(
                r, family["variant"], family["reference"], r["condition"], "correct", r["only_condition"],
                r["only_reference"], "references", label=f"{family['variant']} vs {family['reference']}",
                difference=f"{r['difference']:+.3f}", test=family.get("test", ""), p=_p(r.get("p_value")),
                holm=_p(r.get("p_holm")), verdict=""))
    experiment_info = report.get("experiment") or {}
    bases = {base for base, _ in rows}
    return {"kind": "reproduce", "title": f"icr2 reproduce {experiment_info.get('name')}: "
                                          f"{experiment_info.get('title', '')}",
            "columns": variants + references, "condName": "condition", "conds": list(conditions),
            "headline": "correct", "metrics": ["correct"], "rows": list(rows.values()), "passages": passages.texts,
            # a reference's answer is the question's, the same in each of its condition rows: stored once
            "shared": {base: cells for base, cells in reference_cells.items() if base in bases},
            "comparisons": comparisons, "baseline": variants[0] if variants else None}


def reproduce_tables(report: dict, experiment: Any) -> list[tuple[str, str | None, tuple | None]]:
    """The experiment's tables (``Experiment.tables``) but the paired ones, which the page links to questions."""
    return [(title, note, (header, rows)) for title, note, header, rows in experiment.tables(report)
            if not title.endswith("(paired)")]


def reproduce_figures(report: dict) -> list[Any]:
    """Accuracy per condition, one line per variant and curve with its Wilson interval; the references as lines."""
    import plotly.graph_objects as go

    figures = []
    for group in dict.fromkeys(c["group"] for c in report.get("cells", [])):
        fig = go.Figure()
        for variant in dict.fromkeys(c["variant"] for c in report["cells"]):
            cells = [c for c in report["cells"] if c["group"] == group and c["variant"] == variant
                     and c.get("accuracy") is not None]
            fig.add_scatter(name=variant, x=[c["x"] for c in cells], y=[c["accuracy"] for c in cells],
                            mode="lines+markers",
                            customdata=[[c["ci95"][0], c["ci95"][1], c["n"], c["label"]] for c in cells],
                            error_y={"type": "data", "symmetric": False,
                                     "array": [c["ci95"][1] - c["accuracy"] for c in cells],
                                     "arrayminus": [c["accuracy"] - c["ci95"][0] for c in cells]},
                            hovertemplate=f"{variant}<br>%{{customdata[3]}}: %{{y:.3f}} [%{{customdata[0]:.2f}}, "
                                          "%{customdata[1]:.2f}]<br>n = %{customdata[2]}<extra></extra>")
        for name, cell in (report.get("references") or {}).items():
            if cell.get("accuracy") is not None:
                fig.add_hline(y=cell["accuracy"], line_dash="dot",
                              annotation_text=f"{name} {format_interval({'mean': cell['accuracy'], 'ci95': cell['ci95'], 'n': cell['n']})} n={cell['n']}")  # noqa: E501
        fig.update_layout(title=f"{(report.get('experiment') or {}).get('metric', 'accuracy')}: {group}",
                          xaxis={"title": "position"}, yaxis={"title": "accuracy", "range": [0, 1]})
        figures.append(fig)
    return figures


# ---------------------------------------------------------------------------------------------------- eval-gate


def gate_page_data(report: dict, labels: Iterable[dict]) -> dict[str, Any]:
    """The page's data of an ``icr2 eval-gate --labels`` report and its label lines: one row per labelled question,
    one cell per gate method: its decision and P(yes), and the answer that decision gives (the context answer if it
    retrieves, else the closed-book one) with its match, as ``gate_tradeoff.answer_matches`` scores it; the
    comparisons of each method with always-retrieve (overall and per source)."""
    by_id = {line["id"]: line for line in labels}
    methods = list(report.get("methods") or {})
    passages = _Passages()
    rows = []
    for entry in report.get("rows", []):
        label = by_id.get(entry["id"], {})
        ids = passages.add(None, label.get("passages") or [], prefix=entry["id"])
        cells = {}
        for name in methods:
            retrieve = entry.get(f"{name} retrieve")
            if retrieve is None:
                continue
            right = label.get("context_match") if retrieve else label.get("closed_book_match")
            score = entry.get(f"{name} score")
            cells[name] = {
                "a": (label.get("context_answer") if retrieve else label.get("closed_book_answer")) or "",
                "r": None if right is None else int(bool(right)),
                "s": {"answer_match": int(bool(right))} if right is not None else {},
                "lat": None, "tok": None, "p": ids if retrieve else [],
                "t": {"decision": "retrieve" if retrieve else "answer closed-book",
                      **({"P(yes)": round(score, 4)} if isinstance(score, (int, float)) else {})}}
        rows.append({"id": entry["id"], "q": label.get("question") or "", "gold": label.get("answers") or [],
                     "goldIds": [], "goldByAnswer": 1, "cond": entry.get("source"), "stats": 1,
                     "labels": {"outcome": entry.get("outcome"), "needs retrieval": entry.get("needs_retrieval")},
                     "cells": cells})
    comparisons = []
    baseline = (report.get("all") or {}).get("baseline", "always")
    scopes = [(None, report.get("all") or {}), *(report.get("by_source") or {}).items()]
    for source, comparison in scopes:
        for name, entry in (comparison.get("methods") or {}).items():
            c = (entry.get("vs_always") or {}).get("answer_match") or {}
            if "only_pipeline" not in c:
                continue
            comparisons.append(_comparison(
                c, name, baseline, source, "answer_match", c["only_pipeline"], c["only_baseline"],
                "all questions" if source is None else "per source", label=f"{name} vs {baseline}",
                difference=format_interval(c.get("difference")), test=c.get("test", ""), p=_p(c.get("p_value")),
                holm=_p(c.get("p_holm")), verdict=c.get("verdict", "")))
    return {"kind": "eval-gate", "title": "icr2 eval-gate: gates on labelled questions", "columns": methods,
            "condName": "source", "conds": sorted({r["cond"] for r in rows if r["cond"] is not None}),
            "headline": "answer_match", "metrics": ["answer_match"], "rows": rows, "passages": passages.texts,
            "comparisons": comparisons, "baseline": baseline}


def gate_tables(report: dict) -> list[tuple[str, str | None, tuple | None]]:
    """Every method's retrieval rate, answer match, objective and AUROC with intervals (overall), and the claim."""
    header = ["method", "n", "retrieval rate [95% CI]", "answer match [95% CI]", "objective [95% CI]",
              "AUROC [95% CI]"]
    rows = [[name, str(e.get("n")), *(format_interval(e.get(k)) for k in ("retrieval_rate", "answer_match",
                                                                        "objective", "auroc"))]
            for name, e in ((report.get("all") or {}).get("methods") or {}).items()]
    all_ = report.get("all") or {}
    note = (f"{all_.get('questions')} labelled questions; objective = answer match - {all_.get('cost')} x retrieval "
            "rate; each method's paired tests against always-retrieve are below.")
    tables: list[tuple[str, str | None, tuple | None]] = [("Gate methods", note, (header, rows))]
    if report.get("claim"):
        from icr2_components.evaluation.reports.gate_report import format_claim

        tables.append(("Claim", format_claim(report["claim"]), None))
    return tables


def gate_figures(report: dict) -> list[Any]:
    """Each scored method's trade-off curve (retrieval rate against answer match) and every method's point with its
    answer match interval."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, entry in ((report.get("all") or {}).get("methods") or {}).items():
        if entry.get("curve"):
            fig.add_scatter(name=f"{name} (curve)", x=[p["retrieval_rate"] for p in entry["curve"]],
                            y=[p["answer_match"] for p in entry["curve"]], mode="lines",
                            customdata=[[p["cut"], p["objective"]] for p in entry["curve"]],
                            hovertemplate=f"{name}<br>cut %{{customdata[0]:.4f}}: retrieval rate %{{x:.3f}}, answer "
                                          "match %{y:.3f}, objective %{customdata[1]:.3f}<extra></extra>")
        rate, match = entry.get("retrieval_rate") or {}, entry.get("answer_match") or {}
        if rate.get("mean") is None or match.get("mean") is None:
            continue
        ci = match.get("ci95") or [match["mean"], match["mean"]]
        fig.add_scatter(name=name, x=[rate["mean"]], y=[match["mean"]], mode="markers",
                        customdata=[[ci[0], ci[1], match.get("n")]],
                        error_y={"type": "data", "symmetric": False, "array": [ci[1] - match["mean"]],
                                 "arrayminus": [match["mean"] - ci[0]]},
                        hovertemplate=f"{name}<br>retrieval rate %{{x:.3f}}<br>answer match %{{y:.3f}} "
                                      "[%{customdata[0]:.2f}, %{customdata[1]:.2f}]<br>n = %{customdata[2]}"
                                      "<extra></extra>")
    fig.update_layout(title="retrieval rate against answer match", xaxis={"title": "retrieval rate"},
                      yaxis={"title": "answer match"})
    return [fig]


# ---------------------------------------------------------------------------------------------------- the page


def _tables_html(tables: Sequence[tuple[str, str | None, tuple | None]]) -> str:
    from icr2_components.evaluation.reports.rendering import html_table

    parts = []
    for title, note, table in tables:
        parts.append(f"<h3>{html.escape(title).replace('`', '')}</h3>")
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
        if table:
            parts.append(html_table(*table))
    return "\n".join(parts)


def write_page(data: dict[str, Any], tables: Sequence[tuple[str, str | None, tuple | None]], figures: Sequence[Any],
               out_dir: str | Path) -> Path:
    """Write ``explore.html`` (data, script, styles and figures inline) and ``plotly.min.js`` beside it into
    ``out_dir``; returns the page's path."""
    import plotly.offline

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    library = out / PLOTLY_FILE
    script = plotly.offline.get_plotlyjs()
    if not library.is_file() or library.stat().st_size != len(script.encode("utf-8")):
        library.write_text(script, encoding="utf-8")
    data = {**data, "pageSize": PAGE_SIZE}
    plots = "\n".join(f"<div class='figure' id='figure-{i}'></div>" for i in range(len(figures)))
    # plotly's own JSON of each figure (plotly.io.to_json), drawn by plotly.js once the table is on screen
    figure_json = ("[" + ",".join(fig.to_json() for fig in figures) + "]").replace("</", "<\\/")
    title = html.escape(data.get("title") or "icr2 run")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_resource("explore.css")}</style>
<script src="{PLOTLY_FILE}" defer></script>
</head><body>
<h1>{title}</h1>
<p class="note">Generated from report.json and the run's answer records: every figure here is in report.json; each
answer's score is the report's scorer's. A paired comparison's buttons filter the question table to its discordant
questions.</p>
<section id="summary"><h2>Summary</h2>
{_tables_html(tables)}
<div id="figures">{plots}</div>
<h3>Paired comparisons</h3>
<div id="comparisons"></div>
</section>
<section id="questions-section"><h2>Questions</h2>
<div id="filters"></div>
<div id="row-count"></div>
<div id="table-wrap"><table id="questions"><thead></thead><tbody></tbody></table></div>
<div id="pager"></div>
</section>
<section id="detail" hidden></section>
<script type="application/json" id="page-data">{_json_for_script(data)}</script>
<script type="application/json" id="figure-data">{figure_json}</script>
<script>{_resource("explore.js")}</script>
</body></html>
"""
    path = out / PAGE_FILE
    path.write_text(page, encoding="utf-8")
    return path


def write_compare_page(report: dict, out_dir: str | Path, records: Iterable[dict] | None = None) -> Path:
    """The page of a compare report written into ``out_dir``; ``records``: the answer records the report scored
    (default: read from the run's cache, ``report["run"]["cache"]``, else ``out_dir``'s)."""
    from icr2_components.evaluation.compare.cache import read_answer_records

    out = Path(out_dir)
    cache = _existing_cache(out, "answers.jsonl", (report.get("run") or {}).get("cache"))
    if records is None:
        records = read_answer_records(cache) if cache is not None else []
    judgements = cache.with_name("judgements.jsonl") if cache is not None else out / "judgements.jsonl"
    data = compare_page_data(report, records, judgements)
    return write_page(data, compare_tables(report), compare_figures(report), out)


def write_reproduce_page(report: dict, out_dir: str | Path, experiment: Any, run_dir: str | Path | None = None
                         ) -> Path:
    """The page of a reproduce report written into ``out_dir``, from the answer caches of its run (``compare/`` and
    ``references/`` in the run folder, or ``compare_answers.jsonl.gz`` / ``references_answers.jsonl.gz`` beside
    report.json as the committed runs keep them; ``run_dir``: the run folder, default ``out_dir``). An experiment
    without curves (CUB) gets its tables only."""
    from icr2_components.evaluation.compare.cache import read_answer_records

    out = Path(out_dir)
    run = Path(run_dir) if run_dir is not None else out
    records: list[dict] = []
    references: list[dict] = []
    for folder, target in (("compare", records), ("references", references)):
        cache = _existing_cache(run, f"{folder}_answers.jsonl", None, run / folder / "answers.jsonl")
        if cache is not None:
            target.extend(read_answer_records(cache))
    if report.get("cells") is not None:
        data = reproduce_page_data(report, records, references, experiment)
        figures = reproduce_figures(report)
    else:
        data = {"kind": "reproduce", "title": f"icr2 reproduce {(report.get('experiment') or {}).get('name')}",
                "columns": [], "condName": "condition", "conds": [], "headline": "correct", "metrics": [],
                "rows": [], "passages": {}, "comparisons": [], "baseline": None}
        figures = []
    return write_page(data, reproduce_tables(report, experiment), figures, out)


def write_gate_page(report: dict, out_dir: str | Path) -> Path:
    """The page of an ``eval-gate --labels`` report written into ``out_dir``, from its label files
    (``report["labels"]["files"]``).

    :raises FileNotFoundError: a label file is not where the report says.
    """
    from icr2_components.evaluation.gates.need_labels import read_label_file
    from icr2_components.records import SkipReport

    labels: list[dict] = []
    for path in (report.get("labels") or {}).get("files") or []:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: a label file of this eval-gate report is not there (its path is as "
                                    "given to eval-gate --labels): write the page from the folder eval-gate ran in.")
        labels.extend(read_label_file(path, SkipReport(source=str(path))))
    return write_page(gate_page_data(report, labels), gate_tables(report), gate_figures(report), out_dir)


def _existing_cache(folder: Path, name: str, recorded: str | None, *more: Path) -> Path | None:
    """The first answer cache that exists (plain or gzip) of: ``folder/name``, the path the report recorded (relative
    to where the run was started), and ``more``."""
    from icr2_components.evaluation.compare.cache import resolve_cache_path

    candidates = [folder / name, *([Path(recorded)] if recorded else []), *more]
    for candidate in candidates:
        found = resolve_cache_path(candidate)
        if found.is_file():
            return found
    return None


def merge_reproduce_reports(reports: Sequence[dict]) -> dict:
    """One report of a reproduce run reported in parts over one answer cache (``report.json`` and
    ``report_<part>.json`` of the same experiment and questions, e.g. lost-in-the-middle's 10, 20 and 30
    documents): the conditions, cells, curves and paired families of every part, each as its part states it (a
    family's Holm correction stays its part's). Parts of another experiment or other questions are left out."""
    first = reports[0]
    same = [r for r in reports[1:] if (r.get("experiment") or {}).get("name") == first["experiment"]["name"]
            and (r.get("questions") or {}).get("ids") == first["questions"]["ids"] and r.get("cells") is not None]
    if not same or first.get("cells") is None:
        return first
    merged = dict(first)
    for key in ("conditions", "cells", "curves", "variants_vs_first", "conditions_vs_references", "paper",
                "refused"):
        merged[key] = [item for r in (first, *same) for item in (r.get(key) or [])]
    merged["paper"] = list({json.dumps(f, sort_keys=True): f for f in merged["paper"]}.values())
    merged["parts"] = 1 + len(same)
    return merged


def write_page_for_run(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """The page of a finished run folder (a committed one included): ``report.json`` of compare or reproduce, or
    ``tradeoff.json`` of eval-gate, with its answer records; written into ``out_dir`` (default ``run_dir``).

    :raises FileNotFoundError: the folder holds no report.json nor tradeoff.json.
    """
    run = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run
    if (run / "tradeoff.json").is_file() and not (run / "report.json").is_file():
        return write_gate_page(json.loads((run / "tradeoff.json").read_text(encoding="utf-8")), out)
    if not (run / "report.json").is_file():
        raise FileNotFoundError(f"{run} holds no report.json (compare, reproduce) nor tradeoff.json (eval-gate): "
                                "name a run's output folder.")
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    if "experiment" in report:
        others = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(run.glob("report_*.json"))]
        report = merge_reproduce_reports([report, *others])
        from icr2_components.evaluation.experiments.protocol import get_experiment

        return write_reproduce_page(report, out, get_experiment(report["experiment"]["name"]), run_dir=run)
    records = None
    if out != run:
        from icr2_components.evaluation.compare.cache import read_answer_records

        cache = _existing_cache(run, "answers.jsonl", None)
        records = read_answer_records(cache) if cache is not None else []
    return write_compare_page(report, out, records)


__all__ = [
    "PAGE_FILE",
    "PLOTLY_FILE",
    "compare_page_data",
    "gate_page_data",
    "merge_reproduce_reports",
    "reproduce_page_data",
    "write_compare_page",
    "write_gate_page",
    "write_page",
    "write_page_for_run",
    "write_reproduce_page",
]
