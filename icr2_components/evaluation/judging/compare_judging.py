"""The judge in ``icr2 compare --judge BACKEND``: judge a run's answer records and build the report's ``judge``
section with the compare report's own statistics.

``report["judge"]``: ``judge`` (the backend), ``judge_hash``, ``metrics`` (name -> what it measures, ragas' class),
``summary[pipeline][context_type][metric]`` = ``{"mean", "ci95", "n", "method"}`` (``statistics.intervals``: BCa
bootstrap over questions, Wilson where every value is 0/1) plus ``unparsable`` and ``failed`` (judgements not
scored) and ``not_judged`` (metric -> reason -> answers), ``paired`` (every pipeline against the compare baseline
on the questions both were judged on, per metric and context type: ``compare_report.paired_section``'s paired
bootstrap interval, exact or permutation test, Holm, MDE, verdict) and ``counters`` (judged, cached, stale,
unparsable, failed requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icr2_components.evaluation.judging.judgements import (
    JUDGEMENTS_FILE,
    GivenPassages,
    collect_judgements,
    judge_answers,
)
from icr2_components.evaluation.judging.ragas_judge import JUDGE_METRICS, RagasJudge, parse_metrics
from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED, mean_interval


def given_passages(questions: Sequence[Any], contexts: dict[str, Any], context_types: Sequence[str]) -> GivenPassages:
    """``(question id, context type) -> {passage id: text}`` of the passages compare gives (the oracle's gold
    passages under ``open``), to judge answers recorded before their shown passages' text was."""
    given: dict[tuple[str, str], dict[str, str]] = {}
    for question in questions:
        for kind in context_types:
            documents = question.gold_documents if kind == "open" else contexts[question.id].documents(kind)
            if documents:
                given[(question.id, kind)] = {d.id: d.content or "" for d in documents}
    return given


def judge_section(records: Sequence[dict], judge: RagasJudge, out_dir: str | Path, names: Sequence[str],
                  context_types: Sequence[str], baseline: str, given: GivenPassages | None = None,
                  metrics: Sequence[str] | str | None = None, concurrency: int | None = None, progress: bool = True,
                  ask: bool = True, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Judge ``records`` (``ask=False``: only read the judgements cached, as ``--report-only``) and summarise them
    per pipeline, context type and metric with intervals, unparsable counts and paired tests."""
    from icr2_components.evaluation.compare.cache import AnswerCache
    from icr2_components.evaluation.reports.compare_report import paired_section

    metrics = parse_metrics(metrics)
    if ask:
        judged = judge_answers(records, judge, out_dir, metrics=metrics, concurrency=concurrency, progress=progress,
                               given=given)
    else:
        cache = AnswerCache(Path(out_dir) / JUDGEMENTS_FILE, writable=False)
        judged = collect_judgements(records, cache.records.values(), judge.hash, metrics, given)
        judged.update(not_judged={}, counters={"report_only": True}, file=str(cache.path))
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        for kind in context_types:
            cell = judged["scores"].get((name, kind), {})
            summary.setdefault(name, {})[kind] = {
                metric: {**mean_interval(list(cell.get(metric, {}).values()), seed),
                         "unparsable": judged["unparsable"].get((name, kind), {}).get(metric, 0),
                         "failed": judged["failed"].get((name, kind), {}).get(metric, 0)}
                for metric in metrics}
    paired = paired_section(judged["scores"], names, baseline, context_types, None, seed, metrics=metrics)
    paired.pop("gap_closed", None)  # the gap toward the oracle is answer match's, not the judge's
    return {
        "judge": judge.describe(),
        "judge_hash": judge.hash,
        "metrics": {m: {"measures": JUDGE_METRICS[m][2], "ragas_class": JUDGE_METRICS[m][0]} for m in metrics},
        "summary": summary,
        "unparsable": {m: sum(c.get(m, 0) for c in judged["unparsable"].values()) for m in metrics},
        "failed": {m: sum(c.get(m, 0) for c in judged["failed"].values()) for m in metrics},
        "not_judged": judged.get("not_judged", {}),
        "paired": paired,
        "counters": judged.get("counters", {}),
        "concurrency": judged.get("concurrency"),
        "wall_seconds": judged.get("wall_seconds"),
        "file": judged.get("file"),
    }
