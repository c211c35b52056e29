"""Judging compare's answers without gold labels: every answer record, every judge metric, cached and resumable.

``judge_answers`` asks the judge (``ragas_judge.RagasJudge``) about each answer record of a compare run and each
judge metric whose inputs the record has, at the judge backend's concurrency, and appends each judgement to
``judgements.jsonl.gz`` beside ``answers.jsonl.gz`` as it arrives, in the order of a sequential run
(``concurrency.ordered_calls``). The file is the answer cache's format (``compare.cache.AnswerCache``: sealed lines,
a cut last line cut off, an edited line refused), keyed by ``judgement_key`` (answer record key, judge hash,
metric). A judgement's identity is what decides it: the judge (``judge_hash``: its model and where it runs, ragas'
version, the reply budgets), the metric, and the judged inputs (the question's text, the answer, the passages shown:
``inputs_sha``). A re-run asks only for what is missing: a judgement whose judged inputs differ from the record's
now (the answer was redone, the question reworded) is asked again and replaces the old line; a failed request is
recorded as failed (``error``) and asked again by the next run. Gold labels are no input of the judge metrics, so
an edited gold answer keeps every judgement.

A judgement is a value in [0, 1] or **unparsable** (the judge's replies held no score: counted per metric, never a
value); its raw replies are kept in the line. A record that lacks a metric's inputs (no passages shown: a
closed-book answer; passages not recorded: an answer cached before ``shown_passages``) is not judged on it, and
the reason is counted (``not_judged``).

Usage:
    >>> from icr2_components.evaluation.judging import RagasJudge, judge_answers
    >>> judge = RagasJudge("llama_cpp_server")
    >>> result = judge_answers(records, judge, "runs/compare")
    >>> result["scores"][("vanilla_rag", "open")]["groundedness"]   # {question id: value}
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from icr2_components.concurrency import FailureStreak, Job, Outcome, check_concurrency, ordered_calls, streak_limit
from icr2_components.evaluation.compare.cache import AnswerCache
from icr2_components.evaluation.judging.ragas_judge import JUDGE_METRICS, JudgeRequestError, RagasJudge, parse_metrics

JUDGEMENTS_FILE = "judgements.jsonl.gz"  # gzip, as the answers; an older plain judgements.jsonl resumes in place
REQUEST_ATTEMPTS = 3
"""Tries of one judgement whose request failed (after the client's own retries); then recorded as failed."""
NO_PASSAGES = "no passages shown"
PASSAGES_NOT_RECORDED = "passage text not recorded (answer cached before shown_passages)"


def judgement_key(answer_key: str, judge_hash: str, metric: str) -> str:
    return f"{answer_key}|{judge_hash}|{metric}"


GivenPassages = Mapping[tuple[str, str], Mapping[str, str]]
"""``(question id, context type) -> {passage id: text}``: the passages compare gave each question."""


def shown_passages(record: Mapping[str, Any], given: GivenPassages | None = None
                   ) -> tuple[list[str] | None, str | None]:
    """(the text of the passages the answer was shown, in prompt order; None with the reason when unknown).
    ``given``: ``(question id, context type) -> {passage id: text}`` of the passages compare gave, to rebuild the
    text of records written before ``shown_passages``."""
    ids = record.get("shown_ids")
    if not record.get("reads_context") or not ids:
        return None, NO_PASSAGES
    texts = record.get("shown_passages")
    if texts is not None and len(texts) == len(ids):
        return list(texts), None
    known = (given or {}).get((record["question_id"], record["context_type"])) or {}
    if all(i in known for i in ids):
        return [known[i] for i in ids], None
    return None, PASSAGES_NOT_RECORDED


def inputs_sha(question: str, answer: str, passages: Sequence[str] | None) -> str:
    material = json.dumps([question, answer, list(passages) if passages is not None else None], ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


@dataclass
class _Step:
    record: dict
    metric: str
    key: str
    sha: str
    question: str
    answer: str
    passages: list[str] | None


def _plan(records: Sequence[dict], metrics: Sequence[str], judge: RagasJudge, cache: AnswerCache,
          given, not_judged: dict[str, dict[str, int]], counters: dict[str, int]) -> Iterator[Job[_Step]]:
    for record in records:
        if record.get("error"):
            continue  # a failed answer is not judged (it is counted among the report's errors)
        for metric in metrics:
            needs = JUDGE_METRICS[metric][1]
            passages = None
            if "passages" in needs:
                passages, why = shown_passages(record, given)
                if passages is None:
                    bucket = not_judged.setdefault(metric, {})
                    bucket[why] = bucket.get(why, 0) + 1
                    continue
            key = judgement_key(record["key"], judge.hash, metric)
            sha = inputs_sha(record["query"], record.get("answer") or "", passages)
            cached = cache.records.get(key)
            if cache.done(key) and cached.get("inputs_sha") == sha:
                counters["cached"] += 1
                yield Job(None)
                continue
            counters["stale"] += int(cache.done(key))
            step = _Step(record, metric, key, sha, record["query"], record.get("answer") or "", passages)
            yield Job(step, partial(judge.judge, metric, step.question, step.answer, passages))


def _retryable(error: BaseException) -> bool:
    return isinstance(error, JudgeRequestError)


def _commit(outcome: Outcome[_Step], judge: RagasJudge, cache: AnswerCache, counters: dict[str, int]) -> None:
    step = outcome.key
    record = step.record
    line = {"key": step.key, "answer_key": record["key"], "judge_hash": judge.hash, "judge": judge.describe(),
            "metric": step.metric, "pipeline": record["pipeline"], "pipeline_hash": record["pipeline_hash"],
            "question_id": record["question_id"], "context_type": record["context_type"], "inputs_sha": step.sha}
    if outcome.failed:
        if not isinstance(outcome.error, JudgeRequestError):
            raise outcome.error  # a bug, not the judge's answer
        line.update(value=None, unparsable=False, error=str(outcome.error), failed_request=True,
                    attempts=outcome.attempts)
        counters["failed_requests"] += 1
    else:
        judgement = outcome.value
        line.update(value=judgement.value, unparsable=judgement.unparsable, replies=judgement.replies,
                    seconds=round(outcome.seconds, 3))
        counters["judged"] += 1
        counters["unparsable"] += int(judgement.unparsable)
    cache.add(line)


def judge_answers(records: Sequence[dict], judge: RagasJudge, out_dir: str | Path,
                  metrics: Sequence[str] | str | None = None, concurrency: int | None = None, progress: bool = True,
                  given: GivenPassages | None = None) -> dict[str, Any]:
    """Judge every answer record (without error) on every metric whose inputs it has; cached in
    ``out_dir/judgements.jsonl.gz``. Returns ``scores`` (``(pipeline, context type) -> metric -> {question id:
    value}``), ``unparsable`` (``(pipeline, context type) -> metric -> count``), ``failed`` (likewise, failed
    requests), ``not_judged`` (metric -> reason -> records), ``counters`` and the file. ``concurrency``: judgements
    asked at once (default: the judge backend's ``max_concurrency``)."""
    from tqdm.auto import tqdm

    metrics = parse_metrics(metrics)
    slots = check_concurrency(concurrency if concurrency is not None else judge.concurrency, "--judge-concurrency")
    cache = AnswerCache(Path(out_dir) / JUDGEMENTS_FILE)
    counters = {"judged": 0, "cached": 0, "stale": 0, "unparsable": 0, "failed_requests": 0}
    not_judged: dict[str, dict[str, int]] = {}
    records = [r for r in records if not r.get("error")]
    if records:
        judge.warm_up()
    streak = FailureStreak(streak_limit(slots))
    started = time.perf_counter()
    jobs = _plan(records, metrics, judge, cache, given, not_judged, counters)
    try:
        with tqdm(total=len(records) * len(metrics), desc="judge", unit=" judgements", disable=not progress) as bar:
            for outcome in ordered_calls(jobs, slots, retry_if=_retryable, attempts=REQUEST_ATTEMPTS):
                bar.update(1)
                if outcome.key is None:
                    continue
                _commit(outcome, judge, cache, counters)
                streak.observe(outcome)
    finally:
        cache.compact()  # the last one-judgement gzip members merged into one (atomically), however the run ends
    wall = time.perf_counter() - started
    summary = collect_judgements(records, cache.records.values(), judge.hash, metrics, given)
    summary.update(not_judged=not_judged, counters=counters, concurrency=slots, wall_seconds=round(wall, 3),
                   file=str(cache.path), judge=judge.describe(), judge_hash=judge.hash,
                   unreadable_lines=cache.unreadable_lines)
    return summary


def collect_judgements(records: Sequence[dict], judgements: Any, judge_hash: str, metrics: Sequence[str],
                       given: GivenPassages | None = None) -> dict[str, Any]:
    """The current judgements of ``records`` by this judge: per (pipeline, context type) and metric, the values by
    question id, the unparsable and the failed counts. A judgement of other inputs than the record's now is left
    out (it is redone by the next run)."""
    by_key = {j["key"]: j for j in judgements}
    scores: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    unparsable: dict[tuple[str, str], dict[str, int]] = {}
    failed: dict[tuple[str, str], dict[str, int]] = {}
    for record in records:
        if record.get("error"):
            continue
        cell = (record["pipeline"], record["context_type"])
        for metric in metrics:
            line = by_key.get(judgement_key(record["key"], judge_hash, metric))
            if line is None:
                continue
            passages = shown_passages(record, given)[0] if "passages" in JUDGE_METRICS[metric][1] else None
            if line.get("inputs_sha") != inputs_sha(record["query"], record.get("answer") or "", passages):
                continue
            if line.get("error"):
                bucket = failed.setdefault(cell, {})
                bucket[metric] = bucket.get(metric, 0) + 1
            elif line.get("unparsable"):
                bucket = unparsable.setdefault(cell, {})
                bucket[metric] = bucket.get(metric, 0) + 1
            elif line.get("value") is not None:
                scores.setdefault(cell, {}).setdefault(metric, {})[record["question_id"]] = float(line["value"])
    return {"metrics": list(metrics), "scores": scores, "unparsable": unparsable, "failed": failed}

