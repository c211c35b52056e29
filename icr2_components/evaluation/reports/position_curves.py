"""Position curves of ``icr2 compare``: answer accuracy by where the first gold passage sat in the prompt.

For each pipeline that shows passages, its answers (by default those of the ``open`` context type, where the
pipeline's own retrieval decides the order) are grouped by the 1-based position of the first gold passage among
the passages shown (``shown_ids``, in prompt order), bucketed as ``POSITION_BUCKETS``; a question whose gold
passage was not shown falls in ``NOT_SHOWN``. Each bucket carries its answer count, so a bucket mean over two
answers is visible as such. Pipelines that show no passages (closed-book, or no declared ``documents`` output)
are left out with the reason; so are answers with an error and questions without a known gold passage.

Each bucket's metrics carry their Wilson 95% interval (``intervals``); each curve's shape is tested
(``shape[pipeline][metric]``, ``position_tests.unpaired_position_test``: Fisher's exact test of the first against
the last non-empty position bucket, its p-value also Holm-adjusted across the pipelines' curves (``p_holm``), and
the Fisher-Freeman-Halton test across every position bucket), with a one-line ``verdict``.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.evaluation.metrics.text_metrics import short_answer_exact_match
from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED, format_interval, mean_interval
from icr2_components.evaluation.statistics.paired_comparison import holm
from icr2_components.evaluation.statistics.position_tests import shape_verdict, unpaired_position_test

# (label, first position, last position); positions past the last bucket fall in the open-ended one.
POSITION_BUCKETS = (("1", 1, 1), ("2-3", 2, 3), ("4-5", 4, 5), ("6-10", 6, 10), ("11-20", 11, 20))
OPEN_ENDED = ">20"
NOT_SHOWN = "gold not shown"
BUCKET_LABELS = (*(label for label, _, _ in POSITION_BUCKETS), OPEN_ENDED, NOT_SHOWN)
CURVE_METRICS = ("answer_match", "exact_match")


def first_gold_position(shown_ids: Sequence[str] | None, gold_ids: Iterable[str]) -> int | None:
    """1-based position of the first gold passage among ``shown_ids`` (prompt order); None when none was shown."""
    gold = set(gold_ids)
    for position, passage_id in enumerate(shown_ids or [], start=1):
        if passage_id in gold:
            return position
    return None


def position_bucket(position: int | None) -> str:
    """The bucket label of a 1-based position (``NOT_SHOWN`` for None)."""
    if position is None:
        return NOT_SHOWN
    if not isinstance(position, int) or position < 1:
        raise ValueError(f"A gold position is a 1-based integer or None, got {position!r}.")
    for label, first, last in POSITION_BUCKETS:
        if first <= position <= last:
            return label
    return OPEN_ENDED


def record_accuracy(record: dict) -> dict[str, float]:
    """The curve metrics of one answer record (the same functions as the summary table: exact match on the
    reply's answer span, ``text_metrics.answer_scores``)."""
    return {"answer_match": float(answer_match(record["answer"], record["answers"])),
            "exact_match": float(short_answer_exact_match(record["answer"], record["answers"]))}


def pipeline_curve(records: Sequence[dict], seed: int = DEFAULT_SEED
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """``bucket -> {n, answer_match, exact_match, intervals: {metric: interval}}`` over one pipeline's records,
    and the counts left out."""
    grouped: dict[str, list[dict[str, float]]] = {label: [] for label in BUCKET_LABELS}
    left_out = {"errors": 0, "no_gold_passage_known": 0, "passages_not_recorded": 0}
    for record in records:
        if record.get("error"):
            left_out["errors"] += 1
        elif not record.get("gold_ids"):
            left_out["no_gold_passage_known"] += 1
        elif not [a for a in record.get("answers") or [] if str(a).strip()]:  # a question set's, without answers
            left_out["no_gold_answers"] = left_out.get("no_gold_answers", 0) + 1
        elif record.get("shown_ids") is None:
            left_out["passages_not_recorded"] += 1
        else:
            position = first_gold_position(record["shown_ids"], record["gold_ids"])
            grouped[position_bucket(position)].append(record_accuracy(record))
    curve = {}
    for label, scores in grouped.items():
        point: dict[str, Any] = {"n": len(scores)}
        for metric in CURVE_METRICS:
            point[metric] = statistics.fmean(s[metric] for s in scores) if scores else None
        point["intervals"] = {metric: mean_interval([s[metric] for s in scores], seed) for metric in CURVE_METRICS}
        curve[label] = point
    return curve, left_out


def shows_passages(records: Sequence[dict]) -> bool:
    """True when some answer read a context and recorded the passages it was shown."""
    return any(r.get("reads_context", True) and r.get("shown_ids") is not None for r in records)


def curve_shapes(curves: dict[str, dict[str, dict[str, Any]]], seed: int = DEFAULT_SEED) -> dict[str, dict]:
    """``pipeline -> metric -> test`` (``position_tests.unpaired_position_test`` over the position buckets, in
    order; "gold not shown" is no position), with ``p_holm`` (the first-vs-last p-value Holm-adjusted across the
    pipelines' curves, per metric) and a ``verdict``."""
    positions = [label for label in BUCKET_LABELS if label != NOT_SHOWN]
    shapes: dict[str, dict] = {name: {} for name in curves}
    for metric in CURVE_METRICS:
        tests = {}
        for name, curve in curves.items():
            counts = [(label, round(curve[label][metric] * curve[label]["n"]) if curve[label]["n"] else 0,
                       curve[label]["n"]) for label in positions]
            tests[name] = unpaired_position_test(counts, seed)
        tested = [name for name, test in tests.items() if test["first_vs_last"]]
        adjusted = dict(zip(tested, holm([tests[name]["first_vs_last"]["p_value"] for name in tested]), strict=True))
        for name, test in tests.items():
            if name in adjusted:
                test["first_vs_last"]["p_holm"] = adjusted[name]
            test["verdict"] = shape_verdict(test, adjusted.get(name))
            shapes[name][metric] = test
    return shapes


def position_curves(records: Sequence[dict], pipelines: Sequence[str], context_type: str = "open",
                    seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """The report's ``position_curves`` section: one curve per pipeline that showed passages (each bucket with
    its intervals), each curve's ``shape`` tests, the rest noted."""
    curves: dict[str, dict[str, dict[str, Any]]] = {}
    left_out_answers: dict[str, dict[str, int]] = {}
    left_out_pipelines: dict[str, str] = {}
    for name in pipelines:
        mine = [r for r in records if r["pipeline"] == name and r["context_type"] == context_type]
        if not mine:
            left_out_pipelines[name] = f"no answers for the {context_type!r} context type in this run"
        elif not shows_passages(mine):
            left_out_pipelines[name] = ("shows no passages (closed-book) or declares no `documents` output, so the "
                                        "gold position is unknown")
        else:
            curves[name], left_out_answers[name] = pipeline_curve(mine, seed)
    return {
        "context_type": context_type,
        "buckets": list(BUCKET_LABELS),
        "metrics": list(CURVE_METRICS),
        "curves": curves,
        "shape": curve_shapes(curves, seed),
        "left_out_answers": left_out_answers,
        "left_out_pipelines": left_out_pipelines,
    }


def curve_rows(section: dict) -> tuple[list[str], list[list[str]]]:
    """A table with, per pipeline, a row of answer counts and one row per metric: each bucket's rate and its
    Wilson 95% interval (``-`` for an empty bucket)."""
    header = ["pipeline", "row", *section["buckets"]]
    rows = []
    for name, curve in section["curves"].items():
        rows.append([name, "n", *(str(curve[b]["n"]) for b in section["buckets"])])
        for metric in section["metrics"]:
            rows.append([name, metric, *(format_interval((curve[b].get("intervals") or {}).get(metric))
                                         for b in section["buckets"])])
    return header, rows


def shape_rows(section: dict) -> tuple[list[str], list[list[str]]]:
    """Per pipeline and metric: first vs last position bucket (counts, Fisher p, Holm p), across positions, verdict."""
    header = ["pipeline", "metric", "first vs last", "right/answers", "Fisher p", "Holm p", "across positions p",
              "verdict"]
    rows = []
    for name, per_metric in (section.get("shape") or {}).items():
        for metric, test in per_metric.items():
            pair, across = test.get("first_vs_last"), test.get("across_positions")
            if not pair:
                rows.append([name, metric, "-", "-", "-", "-", "-", test["verdict"]])
                continue
            (r1, w1), (r2, w2) = pair["table"]
            rows.append([name, metric, f"{pair['first']} vs {pair['last']}", f"{r1}/{r1 + w1} vs {r2}/{r2 + w2}",
                         f"{pair['p_value']:.3g}", f"{pair['p_holm']:.3g}", f"{across['p_value']:.3g}",
                         test["verdict"]])
    return header, rows


def curve_notes(section: dict) -> list[str]:
    """One sentence per left-out pipeline and per pipeline with left-out answers."""
    notes = [
        f"{name} is not in the position curves: {reason}." for name, reason in section["left_out_pipelines"].items()
    ]
    for name, counts in section["left_out_answers"].items():
        dropped = {k: v for k, v in counts.items() if v}
        if dropped:
            notes.append(f"{name}: answers left out of its curve: {dropped}.")
    return notes


SHAPE_NOTE = ("Is the shape significant? Different questions fall in different buckets, so the buckets are "
              "independent samples: Fisher's exact test of the first against the last non-empty position bucket "
              "(Holm-adjusted across the pipelines' curves, per metric) and the Fisher-Freeman-Halton test across all "
              "position buckets (Monte Carlo, seeded); 'gold not shown' is not a position. Questions differ between "
              "buckets (a hard question may retrieve its gold passage lower), so a shape is an association, not the "
              "effect of position alone: a paired sweep (bench/position_sweep.py) measures that.")


def curve_markdown(section: dict, table: str, has_plot: bool, shape_table: str | None = None) -> list[str]:
    lines = ["## Position curves", "",
             f"Accuracy by the position of the first gold passage in the passages the reader was shown "
             f"(context type `{section['context_type']}`; n = answers in the bucket; each rate with its Wilson 95% "
             f"interval).", ""]
    lines += [f"- {note}" for note in curve_notes(section)]
    lines += ["", table, ""] if section["curves"] else ["", "No pipeline showed passages: no curve.", ""]
    if shape_table and section["curves"]:
        lines += [SHAPE_NOTE, "", shape_table, ""]
    if has_plot:
        lines += ["![Position curves](position_curves.png)", ""]
    return lines


def curve_html(section: dict, table: str, has_plot: bool, shape_table: str | None = None) -> list[str]:
    parts = ["<h2>Position curves</h2>",
             f"<p>Accuracy by the position of the first gold passage in the passages the reader was shown "
             f"(context type <code>{html.escape(section['context_type'])}</code>; n = answers in the bucket; each "
             f"rate with its Wilson 95% interval).</p>"]
    parts += [f"<p>{html.escape(note)}</p>" for note in curve_notes(section)]
    parts.append(table if section["curves"] else "<p>No pipeline showed passages: no curve.</p>")
    if shape_table and section["curves"]:
        parts += [f"<p>{html.escape(SHAPE_NOTE)}</p>", shape_table]
    if has_plot:
        parts.append("<p><img src='position_curves.png' alt='accuracy by gold passage position'></p>")
    return parts


__all__ = ["BUCKET_LABELS", "CURVE_METRICS", "NOT_SHOWN", "POSITION_BUCKETS", "curve_rows", "curve_shapes",
           "first_gold_position", "pipeline_curve", "position_bucket", "position_curves", "shape_rows"]
