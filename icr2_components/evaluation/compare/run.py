"""``icr2 compare``: every pipeline over the same questions and context types, resumable, with a report.

Usage:
    >>> from icr2_components.evaluation.compare.run import run_compare
    >>> report = run_compare(["pipelines/closed_book.yaml", "pipelines/vanilla_rag.yaml"], limit=10,
    ...                      out_dir="runs/compare", max_new_tokens=16)
    >>> report["summary"]["vanilla_rag"]["gold"]["answer_match"]

Context types: ``open`` (the pipeline as deployed: its own retrieval; the oracle gets the gold passages) and
CUB's controlled ``gold``, ``conflicting`` and ``irrelevant`` (see ``context_types``), where the components
feeding the pipeline's ``metadata.context_input`` are removed and the one passage is given instead. A pipeline
that reads no passages (closed-book) is run once per question and its answer reused for every context type.
Each answer record keeps the prompt the reader was given (``prompt``, text) and what the techniques did (``trace``:
the gate's decision and score, the passages RAP kept and dropped, the corpus builder's budget and confounders;
``pipeline_spec.answer_trace``), the passages shown (``shown_ids``, prompt order), the question's ``gold_ids`` and
``gold_position``, the 1-based position of the first gold passage shown (None: none shown, or no passages read),
from which the report draws its position curves. Records of given passages (controlled types, the oracle's
``open``) carry ``context_sha``; a cached one whose passages differ from this run's is redone (or, with
``report_only``, left out) and counted in ``run.counters.stale_context``; ones from before ``context_sha`` are
reused and counted in ``run.counters.context_unchecked``. Every record keeps the question's text (``query``); one
asked another text than the question set's now is redone likewise (``run.counters.stale_question``). Gold labels
are not part of an answer: every answer, cached or new, is scored with the labels of the question set given now,
and cached answers written with other labels are counted in ``run.counters.labels_changed``
(``evaluation.compare.cache``).

Datasets (``kilt.questions``): a KILT task file (default: the bundled NQ sample), an ICR2 benchmark JSONL, or a
question set in a user's format (``kilt.question_sets.QuestionSet``: JSON lines, CSV, Parquet, a saved ``datasets``
dataset, with a field mapping), whose questions run with or without answers, gold passage ids and a conflicting
answer: each metric is computed where its inputs exist, and ``summary[p][t]["not_computed"]`` says on how many
questions it was not, and why (``report["run"]["question_set"]``: how many questions have each field).

Questions (``evaluation.compare.held_out``): the dataset's in file order, or one side of a seeded dev/test split
(``split="test"``, ``split_seed``, ``dev_fraction``; ``evaluation.compare.splits``), then the first ``limit``; or
exactly
the ids of a question-id file (``question_ids``), in file order, unknown ids counted and reported. Questions a
pipeline's head artifact was probed on are left out (counted); a tuned pipeline is refused on its dev questions.
Every run writes the ids it used to ``question_ids.txt`` in ``out_dir`` and records them, the dataset's path and
SHA-256, how they were chosen and every seed in ``report["run"]``, so two runs can be compared on identical
questions (``--question-ids runs/a/question_ids.txt``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from icr2_components.backends import Backend
from icr2_components.backends.pipelines import request_concurrency
from icr2_components.concurrency import FailureStreak, Job, Outcome, ordered_calls, streak_limit
from icr2_components.errors import ComponentLoadError, find_in_causes
from icr2_components.evaluation.compare.batching import batched_jobs, check_batch_size
from icr2_components.evaluation.compare.cache import (
    CONTEXT_UNCHECKED,
    LABEL_FIELDS,
    QUESTION_UNCHECKED,
    STALE,
    STALE_BUDGET,
    STALE_CONTEXT,
    STALE_QUESTION,
    UNCHECKED,
    AnswerCache,
    cache_key,
    context_sha,
    reuse_decision,
    with_labels,
)
from icr2_components.evaluation.compare.held_out import pipeline_seeds, question_file_comments, select_questions
from icr2_components.evaluation.compare.splits import (
    DEFAULT_DEV_FRACTION,
    DEFAULT_SPLIT_SEED,
    ids_hash,
    write_question_ids,
)
from icr2_components.evaluation.metrics.bcu import CONTEXT_TYPES
from icr2_components.evaluation.reports.position_curves import first_gold_position
from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED
from icr2_components.kilt.context_types import ContextSet, build_context_set
from icr2_components.kilt.question_sets import QuestionSet
from icr2_components.kilt.questions import (
    CompareQuestion,
    answer_pool,
    dataset_label,
    describe_question_source,
    read_compare_questions,
)
from icr2_components.models.served_model import ServedModelError
from icr2_components.parameters import boolean
from icr2_components.pipeline_spec import PipelineSpec

logger = logging.getLogger(__name__)
# ``corpus``: an ICR2 benchmark record's whole corpus in context (gold among confounders), given as is; only an
# ICR2 dataset has one, so it is accepted but never a default
ACCEPTED_CONTEXT_TYPES = (*CONTEXT_TYPES, "corpus")
# a new cache is gzip JSON lines; an older plain answers.jsonl in --out is found and appended to as it is
# (compare/cache.py: resolve_cache_path)
CACHE_FILE = "answers.jsonl.gz"
QUESTION_IDS_FILE = "question_ids.txt"
#: the fields that describe how an answer came about (``pipeline_spec.answer_trace``): the page shows them; they
#: are no part of the answer's key, and a cached record without them (written before them) is reused as it is
ANSWER_TRACE_FIELDS = ("prompt", "prompt_chars", "prompt_truncated", "trace", "trace_passages",
                       "trace_passages_truncated")


def parse_context_types(text: str | Sequence[str]) -> list[str]:
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    unknown = [t for t in items if t not in ACCEPTED_CONTEXT_TYPES]
    if not items or unknown:
        raise ValueError(
            f"--context-types takes a comma-separated subset of {list(ACCEPTED_CONTEXT_TYPES)}; got {text!r}."
        )
    return list(dict.fromkeys(items))


def load_specs(paths: Sequence[str], backend: Backend | None = None,
               reuse_prompt_prefix: bool = False) -> list[PipelineSpec]:
    """Load and check every pipeline before any question runs (a bad file fails the run at once); with
    ``backend``, each follows it (``icr2_components.backends``) and its cache key covers it; with
    ``reuse_prompt_prefix``, its readers that can reuse the last prompt's key/value cache do (the key stays)."""
    if not paths:
        raise ValueError("Name at least one pipeline YAML (--pipelines pipelines/closed_book.yaml ...).")
    specs = [PipelineSpec.from_file(p, backend=backend, reuse_prompt_prefix=reuse_prompt_prefix) for p in paths]
    seen: dict[str, int] = {}
    for spec in specs:
        if spec.name in seen:
            seen[spec.name] += 1
            spec.name = f"{spec.name}_{seen[spec.name]}"
        else:
            seen[spec.name] = 1
    return specs


def expected_context_sha(spec: PipelineSpec, question: CompareQuestion, contexts: ContextSet,
                         context_type: str) -> str | None:
    """The ``context_sha`` of the passages compare gives ``spec`` for this question and context type now: the
    controlled context (``NO_CONTEXT`` when not built; for every pipeline, since the record's
    ``conflicting_answer`` and scoring follow it), the oracle's gold passages under ``open``; None under ``open``
    retrieval, which the pipeline hash covers (index fingerprint)."""
    if context_type == "open":
        return context_sha(question.gold_documents) if spec.documents_input else None
    return context_sha(contexts.documents(context_type))


def question_labels(question: CompareQuestion, contexts: ContextSet, context_type: str) -> dict[str, Any]:
    """The question set's labels of one question and context type (``cache.LABEL_FIELDS``): what its answers are
    scored with, never part of the answer."""
    return {
        "answers": question.answers,
        "gold_ids": [d.id for d in question.gold_documents],
        "conflicting_answer": contexts.conflicting_answer if context_type == "conflicting" else None,
        "task_type": question.task_type,
    }


def _base_record(spec: PipelineSpec, question: CompareQuestion, context_type: str, contexts: ContextSet,
                 sha: str | None = None, max_new_tokens: int | None = None) -> dict:
    labels = question_labels(question, contexts, context_type)
    record = {
        "key": cache_key(spec.hash, question.id, context_type),
        "pipeline": spec.name,
        "pipeline_file": spec.path,
        "pipeline_hash": spec.hash,
        "question_id": question.id,
        "query": question.query,  # the text asked: a record asked another text is stale_question
        "task_type": labels["task_type"],
        "context_type": context_type,
        "answers": labels["answers"],
        "gold_ids": labels["gold_ids"],
        "conflicting_answer": labels["conflicting_answer"],
        "selects_passages": "documents" in spec.outputs and not spec.documents_input,
        "reads_context": spec.context_input is not None,
        "max_new_tokens": max_new_tokens,  # the budget asked (None: the pipeline's own): another run's is stale
    }
    if sha is not None:
        record["context_sha"] = sha
    return record


def gold_position(record: dict) -> int | None:
    """1-based position of the first gold passage among the passages shown; None if none shown or not known."""
    if not record.get("reads_context") or record.get("shown_ids") is None:
        return None
    return first_gold_position(record["shown_ids"], record.get("gold_ids") or [])


def _context_documents(spec: PipelineSpec, question: CompareQuestion, contexts: ContextSet, context_type: str):
    """(documents, controlled, missing reason) for one pipeline, question and context type."""
    if context_type == "open":
        return (question.gold_documents if spec.documents_input else None), False, None
    documents = contexts.documents(context_type)
    if documents is None:
        return None, True, (contexts.reasons or {}).get(context_type, "not built")
    return documents, True, None


REQUEST_ATTEMPTS = 3
"""Tries of one answer whose request failed after the client's own retries (tenacity, exponential backoff); after
the last it is recorded as failed (``error``, ``failed_request``) and answered again by the next run."""


def _retryable(error: BaseException) -> bool:
    return find_in_causes(error, ServedModelError) is not None


@dataclass
class _Step:
    """One (question, pipeline, context type) of the run, in the sequential order; ``call`` prefetches its answer
    when the plan foresees a model run (the commit decides, as a sequential run would, whether it is used)."""

    spec: PipelineSpec
    question: CompareQuestion
    context_type: str
    sha: str | None
    record: dict
    first_key: str | None  # the answer a pipeline that reads no passages reuses (its first context type's)
    documents: list | None
    controlled: bool
    missing: str | None  # why the controlled context was not built (the step is skipped)
    report_only: bool


def _plan_steps(questions, specs, types, contexts, cache: AnswerCache, report_only: bool,
                max_new_tokens: int | None, concurrent: bool = False) -> Iterator[Job[_Step]]:
    """Every step in the order of a sequential run; a step gets a ``call`` when, as far as the cache and the
    steps planned before it tell, it will need the model. What is still in flight (not yet in the cache) is
    foreseen: a pipeline reading no passages reuses its first context type's answer once that one is written.
    ``concurrent``: the call is the pipeline's ``run_async`` (awaited beside the others on ``ordered_calls``'
    event loop: a served reader's requests overlap), else its ``run``."""
    pending: set[str] = set()
    for question in questions:
        for spec in specs:
            first_key = None
            for context_type in types:
                sha = expected_context_sha(spec, question, contexts[question.id], context_type)
                record = _base_record(spec, question, context_type, contexts[question.id], sha, max_new_tokens)
                key = record["key"]
                cached = cache.done(key) and reuse_decision(cache.records[key], sha, max_new_tokens,
                                                            question.query) not in STALE
                documents, controlled, missing = _context_documents(spec, question, contexts[question.id], context_type)
                step = _Step(spec, question, context_type, sha, record, first_key, documents, controlled, missing,
                             report_only)
                reusable = spec.context_input is None and first_key is not None and (
                    cache.done(first_key) or first_key in pending)
                call = None
                if not (cached or key in pending or report_only or missing or reusable):
                    pending.add(key)
                    call = partial(spec.run_async if concurrent else spec.run, question.query, documents,
                                   controlled, max_new_tokens=max_new_tokens)
                if cached or not (report_only or missing):
                    first_key = first_key or key
                yield Job(step, call)


def _commit_step(outcome: Outcome[_Step], cache: AnswerCache, counters: dict[str, int],
                 max_new_tokens: int | None) -> Outcome | None:
    """Write one step as a sequential run would (the same decisions on the same cache, in the same order); the
    prefetched answer stands for its model run, and a step whose run was not foreseen runs now. Returns the
    outcome of the model run the step used (None: it used none)."""
    step = outcome.key
    spec, question, record = step.spec, step.question, dict(step.record)
    key = record["key"]
    if cache.done(key):
        decision = reuse_decision(cache.records[key], step.sha, max_new_tokens, question.query)
        if decision not in STALE:
            counters["cached"] += 1
            if decision in UNCHECKED:
                counters[decision] += 1
            return None
        # asked another text, given other passages or another budget: redo it (report_only: leave it out)
        counters[decision] += 1
    if step.report_only:
        return None
    if step.missing:  # counted once per question, for every pipeline alike
        return None
    first_key = step.first_key
    if spec.context_input is None and first_key is not None and cache.done(first_key):
        source = cache.records[first_key]
        record.update(
            {k: source.get(k) for k in ("answer", "shown_ids", "prompt_tokens", "latency_s", "gold_position")}
        )
        # the same prompt and trace (absent from records written before they were recorded)
        record.update({k: source[k] for k in ANSWER_TRACE_FIELDS if k in source})
        record["reused_from"] = source["context_type"]
        counters["reused_no_context"] += 1
        cache.add(record)
        return None
    ran = outcome if outcome.ran else next(ordered_calls(
        [Job(step, partial(spec.run, question.query, step.documents, step.controlled, max_new_tokens=max_new_tokens))],
        retry_if=_retryable, attempts=REQUEST_ATTEMPTS))
    if not ran.failed:
        record.update(ran.value)
        record["gold_position"] = gold_position(record)
        counters["model_runs"] += 1
        counters["truncated"] += int(record.get("finish_reason") == "length")
    elif isinstance(ran.error, ComponentLoadError):
        raise ran.error  # the pipeline cannot answer any question: no report of n = 0
    elif find_in_causes(ran.error, ServedModelError) is not None:
        # the server failed this request through every retry: recorded as failed (a re-run answers it again)
        record.update(answer="", shown_ids=None, prompt_tokens=None, latency_s=None, gold_position=None,
                      error=str(find_in_causes(ran.error, ServedModelError)), failed_request=True,
                      attempts=ran.attempts)
        counters["failed_requests"] += 1
    else:
        # Haystack wraps a component's error in PipelineRuntimeError; a ValueError inside (e.g. a prompt longer
        # than the reader's context) is this question's problem, anything else a bug.
        cause = find_in_causes(ran.error, ValueError)
        if cause is None:
            raise ran.error
        record.update(answer="", shown_ids=None, prompt_tokens=None, latency_s=None, gold_position=None,
                      error=str(cause))
        counters["errors"] += 1
    cache.add(record)
    return ran


def run_compare(
    pipelines: Sequence[str],
    dataset: str | QuestionSet | None = None,
    context_types: Sequence[str] | str = CONTEXT_TYPES,
    limit: int | None = None,
    out_dir: str | Path = "runs/compare",
    max_new_tokens: int | None = None,
    index: str = "kilt-sample",
    progress: bool = True,
    backend: Backend | None = None,
    baseline: str | None = None,
    seed: int = DEFAULT_SEED,
    question_ids: str | Path | Sequence[str] | None = None,
    split: str | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
    dev_fraction: float = DEFAULT_DEV_FRACTION,
    seeds: dict[str, Any] | None = None,
    report_only: bool = False,
    concurrency: int | None = None,
    batch_size: int = 1,
    judge: Any = None,
    judge_metrics: Sequence[str] | str | None = None,
    judge_concurrency: int | None = None,
    reuse_prompt_prefix: bool = False,
    records_out: list[dict] | None = None,
) -> dict[str, Any]:
    """Run, cache, aggregate and write the report (``report.json``, ``report.md``, ``report.html``, PNGs) and the
    question ids used (``question_ids.txt``). ``baseline``: the pipeline (name) every other is compared with on the
    same questions (default: the first); ``seed``: the report's bootstrap and permutation resampling (recorded as
    ``run.seeds.stats_seed``); ``question_ids``: a question-id file (or a list of ids); ``split``: ``"dev"`` or
    ``"test"`` of the seeded split; ``seeds``: further seeds to record. ``report_only``: run no model; report on
    the questions the cache answers for every pipeline and context type (a long run's partial results, still
    paired), and count the others in ``run.report_only``. ``concurrency``: answers requested at once (default:
    the backend's ``max_concurrency``, 1 without a served backend); the cache, its order and the report are those
    of a sequential run (``icr2_components.concurrency``). ``batch_size``: answers generated together by a
    pipeline whose reader batches (``compare.batching``); the cache and report are again those of 1. ``judge``: a
    judge backend (name, file, ``Backend`` or ``judging.RagasJudge``) that scores every answer with ragas' judge
    metrics (``judge_metrics``, default all; ``evaluation.judging``), cached in ``judgements.jsonl.gz``, at
    ``judge_concurrency`` (default the judge backend's); the report's ``judge`` section. ``reuse_prompt_prefix``:
    readers that can (``LocalChatReader``) start each reply from the last prompt's key/value cache, cropped to
    the prefix both prompts share (in float32 the same greedy replies: the cache and report are those without).
    ``records_out``: a list that receives the answer records the report scored (cached or new, each carrying the
    question set's labels now), for a caller that scores them further (``icr2 reproduce``'s experiments)."""
    from icr2_components.evaluation.reports.compare_report import build_report, resolve_baseline
    from icr2_components.evaluation.reports.interactive_page import write_compare_page
    from icr2_components.evaluation.reports.rendering import write_report

    types, slots = _checked_settings(context_types, limit, max_new_tokens, backend, concurrency, batch_size)
    specs = load_specs(pipelines, backend, reuse_prompt_prefix=boolean(reuse_prompt_prefix, "reuse_prompt_prefix"))
    if judge is not None:  # a bad judge backend or metric name fails before any question runs
        judge, judge_metrics = _judge_and_metrics(judge, judge_metrics)
    baseline = resolve_baseline(baseline, [s.name for s in specs])  # a wrong name fails before any question runs
    if not report_only:
        _warm_up(specs, types, slots)
    selection = select_questions(specs, dataset, limit=limit, question_ids=question_ids, split=split,
                                 split_seed=split_seed, dev_fraction=dev_fraction)
    questions, dataset_path = _read_selected_questions(selection, index)
    contexts = _build_contexts(questions, dataset_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids_file = write_question_ids(out / QUESTION_IDS_FILE, selection.ids, question_file_comments(selection))
    cache = AnswerCache(out / CACHE_FILE)
    # stale_context: cached answers given other passages than this run's (re-answered, or left out by
    # report_only); stale_question: asked another question text (likewise); stale_budget: cached answers under
    # another --max-new-tokens (likewise); context_unchecked / question_unchecked: cached answers that cannot show
    # their passages / their question, reused unchecked; labels_changed: reported answers written with other gold
    # labels than the question set's now (scored with now's); truncated: answers of this run cut at their token
    # budget (finish_reason "length", where the reader says)
    counters = {"model_runs": 0, "cached": 0, "reused_no_context": 0, "errors": 0, "failed_requests": 0,
                "truncated": 0, STALE_CONTEXT: 0, STALE_QUESTION: 0, STALE_BUDGET: 0, CONTEXT_UNCHECKED: 0,
                QUESTION_UNCHECKED: 0, "labels_changed": 0}
    missing_contexts = _missing_contexts(contexts, types)
    answer_wall_seconds = _answer_every_step(questions, specs, types, contexts, cache, counters, report_only,
                                             max_new_tokens, slots, batch_size, progress)
    records = _reported_records(cache, specs, questions, contexts, types, max_new_tokens, counters)
    partial = None
    if report_only:
        records, partial = _complete_questions_only(records, questions, specs, types, contexts)
    if records_out is not None:
        records_out.extend(dict(r) for r in records)
    report = build_report(records, specs, types, baseline=baseline, seed=seed,
                          questions=partial["complete_questions"] if partial else len(questions),
                          not_built=None if partial else missing_contexts)
    if judge is not None:
        from icr2_components.evaluation.judging.compare_judging import given_passages, judge_section

        report["judge"] = judge_section(records, judge, out, [s.name for s in specs], types,
                                        report["paired"]["baseline"], given=given_passages(questions, contexts, types),
                                        metrics=judge_metrics, concurrency=judge_concurrency, progress=progress,
                                        ask=not report_only, seed=seed)
    report["run"] = {
        "dataset": dataset_label(dataset_path),
        # the format read, and for a question set its field mapping and how many questions have each field
        "question_set": describe_question_source(dataset_path, questions),
        # the question set whose labels scored every answer, cached or new (its path above and its SHA-256)
        "dataset_sha256": selection.dataset_sha256,
        "questions": len(questions),
        "question_ids": selection.ids,
        "question_ids_sha256": ids_hash(selection.ids),
        "question_ids_file": str(ids_file),
        "selection": selection.describe(),
        "seeds": {"split_seed": split_seed if split is not None else None, "stats_seed": seed, **(seeds or {}),
                  "pipelines": {s.name: pipeline_seeds(s.data) for s in specs}},
        "context_types": types,
        "pipelines": {s.name: {"file": s.path, "hash": s.hash} for s in specs},
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "reuse_prompt_prefix": reuse_prompt_prefix,
        "backend": backend.describe() if backend is not None else "pipelines' own (local)",
        "counters": counters,
        "concurrency": slots,
        # this run's answering: wall seconds of the loop and model answers per wall second (timing, not results)
        "answer_wall_seconds": round(answer_wall_seconds, 3),
        "answers_per_second": round(counters["model_runs"] / answer_wall_seconds, 3) if answer_wall_seconds else None,
        "dataset_skips": selection.skips.as_dict(),
        "missing_contexts": missing_contexts,
        "unreadable_cache_lines": cache.unreadable_lines,
        "cache": str(cache.path),
        # the summed generation time of the answers reported (their latency_s), whatever run produced them
        "generation_seconds": round(sum(r.get("latency_s") or 0 for r in records if not r.get("reused_from")), 1),
        "report_only": partial,
    }
    write_report(report, out)
    write_compare_page(report, out, records)  # explore.html: every question of the report, from these records
    return report


def _checked_settings(context_types: Sequence[str] | str, limit: int | None, max_new_tokens: int | None,
                      backend: Backend | None, concurrency: int | None, batch_size: int) -> tuple[list[str], int]:
    """The context types asked and the answers requested at once, once the run's numbers are checked.

    :raises ValueError: an unknown context type, a limit or token budget below 1, a bad concurrency or batch size.
    """
    types = parse_context_types(context_types)
    if limit is not None and limit < 1:
        raise ValueError("--limit must be a positive integer.")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError("--max-new-tokens must be a positive integer.")
    slots = request_concurrency(backend, concurrency)
    check_batch_size(batch_size)
    return types, slots


def _judge_and_metrics(judge: Any, judge_metrics: Sequence[str] | str | None) -> tuple[Any, list[str]]:
    """The judge (a ``RagasJudge`` from a backend name, file or ``Backend``) and its metrics, checked."""
    from icr2_components.evaluation.judging import RagasJudge
    from icr2_components.evaluation.judging.ragas_judge import parse_metrics

    return (judge if isinstance(judge, RagasJudge) else RagasJudge(judge)), parse_metrics(judge_metrics)


def _warm_up(specs: Sequence[PipelineSpec], types: Sequence[str], slots: int) -> None:
    """Load every pipeline's components, so that one that cannot load fails the run now, not as n failed
    questions; a controlled pipeline too when several threads would otherwise load it at once."""
    for spec in specs:
        spec.warm_up(spec.pipeline(controlled=False))
        if slots > 1 and set(types) - {"open"}:
            spec.warm_up(spec.pipeline(controlled=True))


def _read_selected_questions(selection: Any, index: str) -> tuple[list[CompareQuestion], str | QuestionSet]:
    """The selected questions read with their passages, and what was read; what the selection left out is logged.

    :raises RuntimeError: a selected question the reader could not read back (both apply the same rules).
    """
    questions, _, dataset_path = read_compare_questions(selection.dataset, index=index, ids=selection.ids)
    read_ids = {q.id for q in questions}
    lost = [i for i in selection.ids if i not in read_ids]
    if lost:  # both readers apply the same rules; a difference is a bug, not a skip
        raise RuntimeError(f"{len(lost)} selected question(s) could not be read back from {dataset_path}: {lost[:5]}.")
    file_info = selection.file or {}
    if file_info.get("unknown"):
        logger.warning(
            "%s: %d question id(s) not in %s left out (e.g. %s)",
            file_info.get("path"),
            file_info["unknown"],
            dataset_path,
            file_info["unknown_examples"][:3],
        )
    excluded = selection.describe()["held_out"]["excluded_probed"]
    if excluded:
        logger.warning(
            "%d question(s) left out: a pipeline's artifact was probed or trained on them (report run.selection)",
            excluded,
        )
    return questions, dataset_path


def _build_contexts(questions: Sequence[CompareQuestion], dataset_path: str | QuestionSet) -> dict[str, ContextSet]:
    """Each question's controlled contexts (gold, conflicting, irrelevant, corpus), by question id."""
    pool = answer_pool(dataset_path)
    return {q.id: build_context_set(q.id, q.answers, q.gold_documents, q.irrelevant_candidates, pool, q.corpus,
                                    conflicting_answer=q.conflicting_answer)
            for q in questions}


def _missing_contexts(contexts: dict[str, ContextSet], types: Sequence[str]) -> dict[str, dict[str, int]]:
    """``context type -> reason -> questions`` of the controlled contexts asked that could not be built."""
    missing: dict[str, dict[str, int]] = {}
    for context_set in contexts.values():
        for context_type, reason in (context_set.reasons or {}).items():
            if context_type in types:
                bucket = missing.setdefault(context_type, {})
                bucket[reason] = bucket.get(reason, 0) + 1
    return missing


def _answer_every_step(questions, specs, types, contexts, cache: AnswerCache, counters: dict[str, int],
                       report_only: bool, max_new_tokens: int | None, slots: int, batch_size: int,
                       progress: bool) -> float:
    """Answer every (question, pipeline, context type) the cache cannot answer, into the cache, in the order of a
    sequential run; returns the loop's wall seconds."""
    from tqdm.auto import tqdm

    total = len(questions) * len(specs) * len(types)
    steps = _plan_steps(questions, specs, types, contexts, cache, report_only, max_new_tokens, concurrent=slots > 1)
    steps = batched_jobs(steps, batch_size, max_new_tokens)  # the same steps; some calls answer N at once
    streak = FailureStreak(streak_limit(slots))
    with tqdm(total=total, desc="compare", unit=" answers", disable=not progress) as bar:
        started = time.perf_counter()
        try:
            for outcome in ordered_calls(steps, slots, retry_if=_retryable, attempts=REQUEST_ATTEMPTS):
                bar.update(1)
                ran = _commit_step(outcome, cache, counters, max_new_tokens)
                if ran is not None:
                    streak.observe(ran)
                    bar.set_postfix_str(
                        f"{counters['model_runs'] / (time.perf_counter() - started):.2f} model answers/s",
                        refresh=False)
        finally:
            cache.compact()  # a gzip cache's last one-answer members merged into one (atomically), however it ends
        return time.perf_counter() - started


def _reported_records(cache: AnswerCache, specs: Sequence[PipelineSpec], questions: Sequence[CompareQuestion],
                      contexts: dict[str, ContextSet], types: Sequence[str], max_new_tokens: int | None,
                      counters: dict[str, int]) -> list[dict]:
    """The cache's records of this run's pipelines, questions and context types that stand for this run's answers
    (a stale one not redone, in a report-only run or for a context no longer built, stays out), each carrying the
    labels of the question set now (``cache.with_labels``); those written with other labels are counted in
    ``counters["labels_changed"]``."""
    by_hash = {s.hash: s for s in specs}
    by_id = {q.id: q for q in questions}
    records = []
    for record in cache:
        spec, question = by_hash.get(record["pipeline_hash"]), by_id.get(record["question_id"])
        if spec is None or question is None or record["context_type"] not in types:
            continue
        context_set, kind = contexts[question.id], record["context_type"]
        expected = expected_context_sha(spec, question, context_set, kind)
        if reuse_decision(record, expected, max_new_tokens, question.query) in STALE:
            continue
        labels = question_labels(question, context_set, kind)
        if any(record.get(k) != labels[k] for k in LABEL_FIELDS):
            counters["labels_changed"] += 1
            record = with_labels(record, labels)
            record["gold_position"] = gold_position(record)  # the first gold passage shown, by now's gold ids
        records.append(record)
    return records


def _complete_questions_only(records: list[dict], questions: Sequence[CompareQuestion],
                             specs: Sequence[PipelineSpec], types: Sequence[str], contexts: dict[str, ContextSet]
                             ) -> tuple[list[dict], dict[str, int]]:
    """For a report-only run: the records of the questions answered by every pipeline under every context type
    built for them, so each paired comparison stands on the same questions; and how many questions were
    complete and incomplete."""
    answered: dict[str, set] = {}
    for r in records:
        if not r.get("error"):
            answered.setdefault(r["question_id"], set()).add((r["pipeline_hash"], r["context_type"]))
    complete = {q.id for q in questions
                if {(s.hash, t) for s in specs for t in types if t == "open"
                    or contexts[q.id].documents(t) is not None} <= answered.get(q.id, set())}
    kept = [r for r in records if r["question_id"] in complete]
    return kept, {"complete_questions": len(complete), "incomplete_questions": len(questions) - len(complete)}
