"""Aggregating compare answers into a report with its uncertainty (``report_rendering`` writes it out).

Every per-pipeline number carries a 95% interval (``intervals``: Wilson for 0/1 scores, BCa bootstrap over
questions otherwise) as ``summary[pipeline][context_type]["intervals"][metric]`` =
``{"mean", "ci95": [low, high], "n", "method"}``; CUB faithfulness and robustness as ``cub[pipeline]["intervals"]``.
``paired`` compares every pipeline with one baseline on the same questions, per context type and metric
(``paired_comparison``: paired bootstrap interval of the difference, exact test, Holm across the pipelines, MDE,
verdict), with the share of the baseline -> oracle gap each pipeline closes when an oracle ran. ``statistics``
records the seed, the resample counts and the methods.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from icr2_components.evaluation.metrics.bcu import bcu, faithfulness, memory_bcu, pareto_front
from icr2_components.evaluation.metrics.external_metrics import external_scores
from icr2_components.evaluation.metrics.short_answer import short_answer
from icr2_components.evaluation.metrics.text_metrics import answer_scores, in_context_recall
from icr2_components.evaluation.reports.position_curves import position_curves
from icr2_components.evaluation.statistics.intervals import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    DEFAULT_SEED,
    METHODS,
    mean_interval,
    mean_of_means_interval,
)
from icr2_components.evaluation.statistics.paired_comparison import (
    ALPHA,
    PERMUTATION_RESAMPLES,
    POWER,
    compare_paired,
    gap_closed,
    holm,
    verdict,
)
from icr2_components.evaluation.statistics.position_tests import MONTE_CARLO_TABLES
from icr2_components.text.normalization import normalize_answer

# rouge_l_ragas: ragas' stemmed ROUGE-L beside ours (None where ragas cannot be imported)
ANSWER_METRICS = ("exact_match", "answer_match", "token_f1", "rouge_l", "rouge_l_ragas")
TABLE_COLUMNS = (*ANSWER_METRICS, "bcu", "in_context_recall", "latency_s", "prompt_tokens")
#: NQ-open keeps questions whose short answer has at most five tokens (Lee et al. 2019, the data of Lost in the
#: Middle); a reader whose answers are mostly longer is answering in sentences, and exact match then scores its
#: wording, not its answer
SHORT_ANSWER_TOKENS = 5
EXACT_MATCH_MIN_SHORT_SHARE = 0.5


def omitted_columns(records: Sequence[dict]) -> dict[str, str]:
    """Columns the report's tables leave out because they cannot mean anything here, each with the reason.

    Exact match (scored on ``short_answer(reply)``) is left out when fewer than half of those short answers have at
    most five tokens after the official normalisation: it stays in ``summary`` / ``paired`` of report.json, only the
    tables drop it.
    """
    answers = [r["answer"] for r in records if not r.get("error") and isinstance(r.get("answer"), str)]
    if not answers:
        return {}
    short = sum(len(normalize_answer(short_answer(a)).split()) <= SHORT_ANSWER_TOKENS for a in answers)
    if short / len(answers) >= EXACT_MATCH_MIN_SHORT_SHARE:
        return {}
    return {
        "exact_match": (
            f"only {short} of {len(answers)} answers ({short / len(answers):.0%}) are short (at most "
            f"{SHORT_ANSWER_TOKENS} tokens once the answer span is taken and normalised): the reader answers in "
            "sentences, so "
            "exact match would score its wording, not its answer; answer match is the headline and "
            "exact match stays in report.json"
        )
    }
CI_KEY = "answer_match_ci95"  # the answer match's Wilson 95% interval [low, high] (= intervals["answer_match"]["ci95"])
COST_METRICS = ("latency_s", "prompt_tokens")  # a difference is "higher"/"lower", not "better"/"worse"
HEADLINE_METRICS = ("answer_match", "exact_match")  # the paired rows the CLI prints (the report has every metric)
GAP_CONTEXT_TYPE = "open"  # under CUB's controlled contexts every pipeline reads the oracle's passage


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


def has_gold_answers(record: dict) -> bool:
    """Whether the question has a gold answer (a question set's may have none: no answer metric is computed)."""
    return any(isinstance(a, str) and a.strip() for a in record.get("answers") or [])


def score_record(record: dict, memory: dict[str, str], external: dict[str, float] | None = None
                 ) -> dict[str, float | None]:
    """Every per-answer number the report averages; ``external`` (Haystack/ragas scores) overrides ours. A metric
    whose inputs the question lacks is None (``not_computed_reason`` says why)."""
    if has_gold_answers(record):
        scores: dict[str, float | None] = dict(answer_scores(record["answer"], record["answers"]))
        scores["rouge_l_ragas"] = None
        scores.update(external or {})
        scores["bcu"] = record_bcu(record, memory)
    else:
        scores = dict.fromkeys((*ANSWER_METRICS, "bcu"))
    recall = None
    if record["context_type"] == "open" and record.get("shown_ids") is not None and record.get("selects_passages"):
        recall = in_context_recall(record["shown_ids"], record.get("gold_ids") or [])
    scores["in_context_recall"] = recall
    scores["latency_s"] = record.get("latency_s")
    scores["prompt_tokens"] = record.get("prompt_tokens")
    return scores


# why a metric was not computed on an answer: reasons that hold by definition (BCU is CUB's controlled contexts',
# recall is of a pipeline's own retrieval) stay in report.json and out of the coverage table
NO_GOLD_ANSWERS = "no gold answers"
STRUCTURAL_REASONS = ("open context: BCU scores CUB's gold, conflicting and irrelevant contexts",
                      "corpus context: BCU scores CUB's gold, conflicting and irrelevant contexts",
                      "controlled context: recall is of the pipeline's own retrieval (open)",
                      "the pipeline reports no passages it chose (closed-book, given them, or no `documents` output)")


def not_computed_reason(record: dict, metric: str) -> str:
    """Why ``metric`` is None for this answer record (called only where it is)."""
    if record.get("error"):
        return "the answer failed (error recorded)"
    kind = record["context_type"]
    if metric in ANSWER_METRICS or metric == "bcu":
        if metric == "bcu" and kind in ("open", "corpus"):
            return STRUCTURAL_REASONS[0 if kind == "open" else 1]
        if not has_gold_answers(record):
            return NO_GOLD_ANSWERS
        if metric == "rouge_l_ragas":
            return "rouge-score cannot be imported (see metric_implementations)"
        if metric == "bcu" and kind == "conflicting":
            return "no conflicting answer"
    if metric == "in_context_recall":
        if kind != "open":
            return STRUCTURAL_REASONS[2]
        if not record.get("selects_passages"):
            return STRUCTURAL_REASONS[3]
        if record.get("shown_ids") is None:
            return "the passages shown were not recorded"
        if not record.get("gold_ids"):
            return "no gold passage ids (in the index)"
    if metric in ("latency_s", "prompt_tokens"):
        return "not reported by the reader"
    return "not computed for this answer"


def coverage_cell(records: Sequence[dict], scores: dict[str, dict[str, float]], metrics: Sequence[str],
                  questions: int | None, not_built: dict[str, int] | None) -> dict[str, dict[str, int]]:
    """``metric -> {reason: questions}`` for every metric of one pipeline and context type computed on fewer than
    the run's questions: each answer's reason, and the questions with no answer record (their context type not
    built, by ``not_built``'s reasons; else left out of this report)."""
    answered = {r["question_id"]: r for r in records}
    absent = max((questions if questions is not None else len(answered)) - len(answered), 0)
    missing: dict[str, int] = {}
    for reason, count in (not_built or {}).items():
        take = min(count, absent - sum(missing.values()))
        if take > 0:
            missing[f"context not built: {reason}"] = take
    rest = absent - sum(missing.values())
    if rest > 0:
        missing["no answer recorded for this report"] = rest
    cell: dict[str, dict[str, int]] = {}
    for metric in metrics:
        reasons = dict(missing)
        for question_id, record in answered.items():
            if question_id not in scores.get(metric, {}):
                reason = not_computed_reason(record, metric)
                reasons[reason] = reasons.get(reason, 0) + 1
        if reasons:
            cell[metric] = reasons
    return cell


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def resolve_baseline(baseline: str | None, names: Sequence[str]) -> str:
    """The baseline pipeline's name: ``baseline`` (or its tuned copy, ``NAME.tuned``), by default the first."""
    if not names:
        raise ValueError("No pipeline to compare.")
    if baseline is None:
        return names[0]
    for candidate in (baseline, f"{baseline}.tuned"):
        if candidate in names:
            return candidate
    raise ValueError(f"--baseline {baseline!r} is not a pipeline of this run; the pipelines are: {', '.join(names)}.")


def oracle_name(specs: Sequence[Any]) -> str | None:
    """The pipeline whose ``metadata.technique`` is ``oracle`` (else the one named ``oracle``), if exactly one."""
    by_technique = [s.name for s in specs
                    if ((getattr(s, "data", None) or {}).get("metadata") or {}).get("technique") == "oracle"]
    if len(by_technique) == 1:
        return by_technique[0]
    named = [s.name for s in specs if s.name == "oracle"]
    return named[0] if len(by_technique) == 0 and named else None


def per_question_scores(records: Sequence[dict], memory: dict[str, str], external_by_record: dict[int, dict]
                        ) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    """``(pipeline, context_type) -> metric -> {question id: score}`` over the answers without error (a metric
    that is None for an answer, e.g. in-context recall of the oracle, is left out)."""
    table: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for record in records:
        if record.get("error"):
            continue
        scores = score_record(record, memory, external_by_record.get(id(record)))
        cell = table.setdefault((record["pipeline"], record["context_type"]), {m: {} for m in TABLE_COLUMNS})
        for metric in TABLE_COLUMNS:
            if scores.get(metric) is not None:
                cell[metric][record["question_id"]] = float(scores[metric])
    return table


def paired_section(scores: dict[tuple[str, str], dict[str, dict[str, float]]], names: Sequence[str], baseline: str,
                   context_types: Sequence[str], oracle: str | None, seed: int,
                   metrics: Sequence[str] = TABLE_COLUMNS) -> dict[str, Any]:
    """Every other pipeline against ``baseline`` on the questions both answered, per context type and metric
    (``metrics``: the table's, or others scored per question, e.g. the judge's); Holm across the pipelines (one
    family per metric and context type); the gap closed toward the oracle."""
    others = [n for n in names if n != baseline]
    comparisons = []
    for kind in context_types:
        base = scores.get((baseline, kind), {})
        for metric in metrics:
            family = []
            for name in others:
                mine = scores.get((name, kind), {}).get(metric, {})
                theirs = base.get(metric, {})
                common = [q for q in mine if q in theirs]
                if common:
                    family.append((name, common, [mine[q] for q in common], [theirs[q] for q in common]))
            m = len(family)
            results = []
            for name, common, a, b in family:
                result = compare_paired(a, b, seed, mde_alpha=ALPHA / m)
                results.append({"pipeline": name, "baseline": baseline, "context_type": kind, "metric": metric,
                                "n": len(common), **result, "mde_alpha": ALPHA / m, "family_size": m})
            for result, adjusted in zip(results, holm([r["p_value"] for r in results]), strict=True):
                result["p_holm"] = adjusted
                result["verdict"] = verdict(result["difference"]["mean"], adjusted, result["n"], result["mde"],
                                            higher_is_better=metric not in COST_METRICS,
                                            largest=None if metric in COST_METRICS else 1.0)
            comparisons += results
    return {
        "baseline": baseline,
        "alpha": ALPHA,
        "power": POWER,
        "holm_family": "for each metric and context type, the pipelines compared with the baseline "
                       f"({len(others)} at most)",
        "comparisons": comparisons,
        "gap_closed": gap_section(scores, names, baseline, oracle, comparisons, seed),
    }


def gap_section(scores, names: Sequence[str], baseline: str, oracle: str | None, comparisons: list[dict],
                seed: int) -> dict[str, Any]:
    """``(pipeline - baseline) / (oracle - baseline)`` in answer match on the open context type, per pipeline, on
    the questions all three answered, with its interval and whether the paired answer-match difference with the
    baseline is positive and significant after Holm. The report states the figure; what share counts as enough is
    the reader's claim to make, not the library's."""
    section: dict[str, Any] = {"oracle": oracle, "context_type": GAP_CONTEXT_TYPE, "metric": "answer_match",
                               "results": []}
    if oracle is None or oracle == baseline:
        section["note"] = "no oracle pipeline (metadata.technique: oracle) besides the baseline in this run"
        return section
    kind = GAP_CONTEXT_TYPE
    base = scores.get((baseline, kind), {}).get("answer_match", {})
    best = scores.get((oracle, kind), {}).get("answer_match", {})
    if not base or not best:
        section["note"] = f"no {kind!r} answers of the baseline and the oracle"
        return section
    tests = {c["pipeline"]: c for c in comparisons if c["context_type"] == kind and c["metric"] == "answer_match"}
    for name in names:
        if name in (baseline, oracle):
            continue
        mine = scores.get((name, kind), {}).get("answer_match", {})
        common = [q for q in mine if q in base and q in best]
        if not common:
            continue
        result = gap_closed([mine[q] for q in common], [base[q] for q in common], [best[q] for q in common], seed)
        test = tests.get(name)
        significant = bool(test and test["p_holm"] < ALPHA and test["difference"]["mean"] > 0)
        result.update(pipeline=name, significant_after_holm=significant)
        section["results"].append(result)
    return section


def pareto_status(cub: dict[str, dict[str, Any]], front: Sequence[str]) -> dict[str, str]:
    """Per pipeline with a point: ``on front``; or, off the front, ``dominated by X`` when some front pipeline that
    dominates it has a 95% interval entirely above its own on at least one axis; else ``within noise of X``
    (intervals overlap on both axes: not clearly dominated)."""
    def above(p: dict, q: dict, axis: str) -> bool:
        a, b = p["intervals"][axis]["ci95"], q["intervals"][axis]["ci95"]
        return a is not None and b is not None and a[0] > b[1]

    status = {}
    for name, q in cub.items():
        if q["faithfulness"] is None or q["robustness"] is None:
            continue
        if name in front:
            status[name] = "on front"
            continue
        dominating = [o for o in front if cub[o]["faithfulness"] >= q["faithfulness"]
                      and cub[o]["robustness"] >= q["robustness"]]
        clear = [o for o in dominating if above(cub[o], q, "faithfulness") or above(cub[o], q, "robustness")]
        status[name] = (f"dominated by {', '.join(clear)}" if clear
                        else f"within noise of {', '.join(dominating)}" if dominating else "off front")
    return status


def build_report(records: Sequence[dict], specs: Sequence[Any], context_types: Sequence[str],
                 baseline: str | None = None, seed: int = DEFAULT_SEED, questions: int | None = None,
                 not_built: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """``summary[pipeline][context_type]``: each metric's mean, ``n``, ``errors``, ``intervals[metric]`` (whose
    ``n`` is the questions the metric was computed on), ``not_computed[metric]`` (``{reason: questions}`` for the
    others of the run's ``questions``; ``not_built``: context type -> ``{reason: questions}`` not given it) and
    ``answer_match_ci95``; ``cub[pipeline]`` faithfulness/robustness with ``intervals``, Pareto front and
    ``pareto_status``; ``paired`` (every pipeline against ``baseline``, default the first, with the gap closed
    toward an oracle); ``position_curves`` (accuracy by gold passage position, with intervals and shape tests);
    ``statistics`` (seed, methods) and ``metric_implementations`` (who computed what)."""
    names = [s.name for s in specs]
    baseline = resolve_baseline(baseline, names)
    no_context = {s.name for s in specs if s.context_input is None}
    memory = memory_answers(records, no_context)
    answered = [r for r in records if not r.get("error") and has_gold_answers(r)]
    external, implementations = external_scores(answered)
    external_by_record = {id(r): scores for r, scores in zip(answered, external, strict=True)}
    scores = per_question_scores(records, memory, external_by_record)
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in specs:
        summary[spec.name] = {}
        for kind in context_types:
            chosen = [r for r in records if r["pipeline"] == spec.name and r["context_type"] == kind]
            valid = [r for r in chosen if not r.get("error")]
            cell = scores.get((spec.name, kind), {m: {} for m in TABLE_COLUMNS})
            row: dict[str, Any] = {metric: _mean(list(cell[metric].values())) for metric in TABLE_COLUMNS}
            row["n"] = len(valid)
            row["errors"] = len(chosen) - len(valid)
            row["intervals"] = {metric: mean_interval(list(cell[metric].values()), seed) for metric in TABLE_COLUMNS}
            row[CI_KEY] = row["intervals"]["answer_match"]["ci95"] if valid else None
            row["questions"] = questions if questions is not None else len({r["question_id"] for r in chosen})
            row["not_computed"] = coverage_cell(chosen, cell, TABLE_COLUMNS, questions, (not_built or {}).get(kind))
            summary[spec.name][kind] = row
    cub = {}
    for name, rows in summary.items():
        irrelevant = rows.get("irrelevant", {}).get("bcu")
        # faithfulness on the paired set: the questions given both a gold and a conflicting context (a question
        # without a conflicting substitute would otherwise count in one half only, mixing two question sets)
        gold_q, conflicting_q = (scores.get((name, k), {}).get("bcu", {}) for k in ("gold", "conflicting"))
        paired = sorted(set(gold_q) & set(conflicting_q))
        halves = [[gold_q[q] for q in paired], [conflicting_q[q] for q in paired]]
        entry: dict[str, Any] = {
            "faithfulness": faithfulness(_mean(halves[0]), _mean(halves[1])) if paired else None,
            "robustness": irrelevant, "faithfulness_questions": len(paired)}
        entry["intervals"] = {
            "faithfulness": (mean_of_means_interval(halves, seed) if paired else mean_interval([], seed)),
            "robustness": (rows["irrelevant"]["intervals"]["bcu"] if irrelevant is not None
                           else mean_interval([], seed)),
        }
        cub[name] = entry
    points = {n: (v["faithfulness"], v["robustness"]) for n, v in cub.items()
              if v["faithfulness"] is not None and v["robustness"] is not None}
    front = pareto_front(points)
    return {
        "summary": summary,
        "cub": cub,
        "pareto_front": front,
        "pareto_status": pareto_status(cub, front),
        "omitted_columns": omitted_columns(records),
        "memory_target": "closed-book answer" if memory else "gold answers (no closed-book pipeline in the run)",
        "metric_implementations": implementations,
        "paired": paired_section(scores, names, baseline, context_types, oracle_name(specs), seed),
        "position_curves": position_curves(records, names, seed=seed),
        "statistics": {
            "confidence": CONFIDENCE,
            "seed": seed,
            "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
            "permutation_resamples": PERMUTATION_RESAMPLES,
            "monte_carlo_tables": MONTE_CARLO_TABLES,
            "interval_methods": METHODS,
            "interval_rule": "Wilson where every value is 0/1, else BCa bootstrap over questions (percentile where "
                             "BCa is undefined); faithfulness, on the questions given both a gold and a conflicting "
                             "context, resamples them jointly over the two",
            "paired_tests": "exact McNemar (scipy binomtest on the discordant pairs) for 0/1 scores, paired sign-flip "
                            "permutation test of the mean difference otherwise; Holm (statsmodels multipletests) "
                            "across the pipelines compared with the baseline, per metric and context type",
            "mde": f"(z(1 - alpha/2) + z(power)) * sd / sqrt(n) with alpha = {ALPHA} / m (m: pipelines in the Holm "
                   f"family), power = {POWER}; sd = sqrt(discordant pairs / n) for 0/1 scores, else the standard "
                   "deviation of the per-question differences",
        },
    }
