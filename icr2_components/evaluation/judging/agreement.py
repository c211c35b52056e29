"""How far a judge can be trusted: agreement of each judge metric with answer match, where gold answers exist.

On questions with gold answers, each answer is scored by answer match (right or wrong, ``metrics.answer_match``)
and by the judge; each judge metric is **binarised** at ``threshold`` (default 0.5: a value >= 0.5 counts as
"good"; for the two rating metrics that is a mean rating of at least "partially" over ragas' two prompts, for
answer relevance a cosine of at least 0.5 between the question and the one the judge wrote back) and compared with
answer match by Cohen's kappa (``sklearn.metrics.cohen_kappa_score``), with a 95% percentile bootstrap interval
over answers (``scipy.stats.bootstrap``, paired resampling, seeded). Answers whose judgement was unparsable (or
failed) are left out of that metric's n and counted.

``run_judge_agreement`` answers held-out NQ-sample questions with a reader (``icr2 compare`` on the reader's
backend, judged by the judge backend) and returns the agreement; ``bench/judge_agreement.py`` is its command.

Usage:
    >>> from icr2_components.evaluation.judging.agreement import kappa_interval
    >>> kappa_interval([1, 0, 1, 1, 0, 0], [1, 0, 1, 0, 0, 1], seed=0)["kappa"]
    0.333...
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from icr2_components.evaluation.statistics.intervals import BOOTSTRAP_RESAMPLES, DEFAULT_SEED

DEFAULT_THRESHOLD = 0.5


def _kappa(a: Sequence[int], b: Sequence[int]) -> float:
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one rater constant: kappa is undefined (NaN), said as such
        value = float(cohen_kappa_score(a, b))
    return value


def kappa_interval(judge: Sequence[int], reference: Sequence[int], seed: int = DEFAULT_SEED,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Any]:
    """Cohen's kappa of two 0/1 ratings of the same answers with a 95% percentile bootstrap interval (answers
    resampled, the pair kept together). ``kappa`` is None where it is undefined (a rater constant on all answers);
    ``ci95`` None where fewer than 2 answers, or every resample is undefined."""
    from scipy.stats import bootstrap

    a, b = np.asarray(judge, dtype=int), np.asarray(reference, dtype=int)
    n = len(a)
    result: dict[str, Any] = {"n": n, "kappa": None, "ci95": None, "method": "bootstrap-percentile",
                              "agreement": float(np.mean(a == b)) if n else None,
                              "confusion": {"judge_1_match_1": int(np.sum((a == 1) & (b == 1))),
                                            "judge_1_match_0": int(np.sum((a == 1) & (b == 0))),
                                            "judge_0_match_1": int(np.sum((a == 0) & (b == 1))),
                                            "judge_0_match_0": int(np.sum((a == 0) & (b == 0)))}}
    if n == 0:
        return result
    kappa = _kappa(a, b)
    result["kappa"] = None if math.isnan(kappa) else kappa
    if n < 2 or result["kappa"] is None:
        return result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = bootstrap((a, b), lambda x, y: _kappa(x, y), paired=True, vectorized=False, method="percentile",
                          n_resamples=resamples, rng=np.random.default_rng(seed))
    low, high = found.confidence_interval
    if not (math.isnan(low) or math.isnan(high)):
        result["ci95"] = [float(low), float(high)]
    else:  # some resamples had a constant rater: the interval of those where kappa is defined
        values = found.bootstrap_distribution
        values = values[~np.isnan(values)]
        if len(values):
            result["ci95"] = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
            result["method"] = f"bootstrap-percentile over the {len(values)} of {resamples} resamples where defined"
    return result


def judge_agreement(records: Sequence[dict], judged: dict[str, Any], threshold: float = DEFAULT_THRESHOLD,
                    seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Per judge metric: Cohen's kappa (with its interval, n, raw agreement and confusion counts) between the
    metric binarised at ``threshold`` and answer match, over the answer records with gold answers that the judge
    scored (``judged``: ``judgements.judge_answers``' or ``collect_judgements``' result); unparsable and failed
    judgements are counted, not scored."""
    from icr2_components.evaluation.metrics.answer_match import answer_match

    results: dict[str, Any] = {}
    for metric in judged["metrics"]:
        judge_bits, match_bits = [], []
        for record in records:
            if record.get("error") or not any(isinstance(a, str) and a.strip() for a in record.get("answers") or []):
                continue
            value = judged["scores"].get((record["pipeline"], record["context_type"]), {}).get(metric, {}).get(
                record["question_id"])
            if value is None:
                continue
            judge_bits.append(int(value >= threshold))
            match_bits.append(int(answer_match(record["answer"], record["answers"])))
        entry = kappa_interval(judge_bits, match_bits, seed=seed)
        entry.update(threshold=threshold, judge_positive_rate=float(np.mean(judge_bits)) if judge_bits else None,
                     answer_match_rate=float(np.mean(match_bits)) if match_bits else None,
                     unparsable=sum(c.get(metric, 0) for c in judged["unparsable"].values()),
                     failed=sum(c.get(metric, 0) for c in judged["failed"].values()))
        results[metric] = entry
    return results


def run_judge_agreement(question_ids: str | Path | Sequence[str], limit: int | None = None,
                        reader_backend: str = "llama_cpp_server", judge_backend: str = "llama_cpp_server",
                        pipeline: str = "vanilla_rag", out_dir: str | Path = "runs/judge_agreement",
                        max_new_tokens: int = 32, threshold: float = DEFAULT_THRESHOLD, seed: int = DEFAULT_SEED,
                        context_type: str = "open", progress: bool = True) -> dict[str, Any]:
    """Answer the first ``limit`` of ``question_ids`` (a question-id file such as
    ``bench/data/heldout_nq_ids.txt``, or ids) of the bundled NQ sample with ``pipeline`` on ``reader_backend``
    (``context_type``: ``open``, the pipeline's own retrieval, or one of compare's controlled contexts such as
    ``gold``, the question's gold passage alone), judge every answer with ``judge_backend`` and return the
    agreement of each judge metric with answer match (``judge_agreement``) beside the run's facts. Resumable: the
    answers and judgements are cached in ``out_dir``."""
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.compare.run import run_compare
    from icr2_components.evaluation.judging.judgements import JUDGEMENTS_FILE, collect_judgements
    from icr2_components.evaluation.judging.ragas_judge import RagasJudge

    if isinstance(question_ids, (str, Path)):
        lines = Path(question_ids).read_text(encoding="utf-8").splitlines()
        ids = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    else:
        ids = list(question_ids)
    if limit is not None:
        ids = ids[:limit]
    judge = RagasJudge(judge_backend)
    scored: list[dict] = []  # the answers compare reported, with the questions' gold now (answer match's)
    report = run_compare([pipeline], context_types=context_type, question_ids=ids, out_dir=out_dir,
                         max_new_tokens=max_new_tokens, backend=resolve_backend(reader_backend), judge=judge,
                         progress=progress, seed=seed, records_out=scored)
    wanted = set(report["run"]["question_ids"])
    hashes = {p["hash"] for p in report["run"]["pipelines"].values()}
    records = [r for r in scored
               if r["question_id"] in wanted and r["pipeline_hash"] in hashes and r["context_type"] == context_type]
    judgements = read_answer_records(Path(out_dir) / JUDGEMENTS_FILE)
    judged = collect_judgements(records, judgements, judge.hash, list(report["judge"]["metrics"]))
    return {
        "agreement": judge_agreement(records, judged, threshold=threshold, seed=seed),
        "questions": len(records),
        "pipeline": pipeline,
        "reader": report["run"]["backend"],
        "judge": judge.describe(),
        "judge_hash": judge.hash,
        "context_type": context_type,
        "answer_match": report["summary"][next(iter(report["summary"]))][context_type]["intervals"]["answer_match"],
        "judge_summary": report["judge"]["summary"],
        "answer_wall_seconds": report["run"]["answer_wall_seconds"],
        "judge_wall_seconds": report["judge"]["wall_seconds"],
        "judge_counters": report["judge"]["counters"],
        "threshold": threshold,
        "binarised": f"judge value >= {threshold} is 1",
        "out_dir": str(out_dir),
    }
