"""Need-for-retrieval labels from the reader itself: RetrievalQA's per-model labelling, resumable.

RetrievalQA (https://arxiv.org/abs/2402.16457, §2 and A.2) decides per model whether a question needs retrieval:
a question the model cannot answer without external knowledge needs it; one it answers from its parameters does
not. Here each question is answered twice by the same reader, greedily: closed-book (RetrievalQA Fig. 7) and with
its context (Fig. 8: the question's gold passages, or the passages the index retrieves), and scored with answer
match. Four outcomes, all recorded (``OUTCOMES``):

=====================  ===========  ============  ==========================================================
outcome                closed-book  with context  needs retrieval
=====================  ===========  ============  ==========================================================
``context_only``       wrong        right         **yes**: retrieval changed the outcome
``both_right``         right        right         no: the reader knows it
``closed_book_only``   right        wrong         no: the context hurt (retrieving would cost the answer)
``both_wrong``         wrong        wrong         ``both_wrong`` policy: ``no_need`` (default: retrieval gains
                                                  nothing for this reader, and costs) or ``exclude`` (no label,
                                                  as RetrievalQA leaves out its case 3; counted)
=====================  ===========  ============  ==========================================================

Both answers are kept, so the answer match of any retrieval decision can be recomputed from the labels
(``retrieve ? context_match : closed_book_match``) without answering again: that is what ``icr2 eval-gate
--labels`` and ``icr2 train-gate`` read.

Questions: NQ-sample questions (by question-id file or by position range of the task file; their gold passages
come from the index's corpus, as in ``icr2 compare``) and RetrievalQA-format JSONL (``gate_eval.jsonl``; a
question without ``context`` gets the index's top passages, recorded as ``retrieved``, or is skipped and counted
without ``--index``). A RetrievalQA question's id is ``<file stem>:<first 12 hex digits of SHA-256(question)>``.

The output JSONL is also the cache: one line per question, appended and flushed as it is answered (the key covers
the reader, the question and its passages); a re-run skips what is done. Counts per source and outcome are
printed and written beside it (``<out>.counts.json``).

Usage:
    >>> from icr2_components.evaluation.gates.need_labels import label_questions, nq_questions, reader_for
    >>> questions, skips = nq_questions(ids=["nq-sample-00101", "nq-sample-00102"])
    >>> reader, reader_key = reader_for(model="smollm2-135m-instruct", max_new_tokens=24)
    >>> result = label_questions(questions, reader, reader_key, "runs/labels/train.jsonl")
    >>> result["counts"]["all"]
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from icr2_components.evaluation.compare.cache import AnswerCache
from icr2_components.evaluation.gates.gate_eval import closed_book_messages, context_messages, read_retrievalqa_jsonl
from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.strict_mapping import TypeCheckError, check_type

OUTCOMES = ("context_only", "both_right", "closed_book_only", "both_wrong")
BOTH_WRONG_POLICIES = ("no_need", "exclude")
CONTEXT_KINDS = ("gold", "retrieved")
DEFAULT_MAX_PASSAGES = 2
LABEL_FIELDS = ("id", "question", "answers", "source", "closed_book_match", "context_match", "outcome")


@dataclass
class NeedQuestion:
    """One question to label: its passages (gold or retrieved, as ``context_kind`` says)."""

    id: str
    question: str
    answers: list[str]
    source: str
    passages: list[str] = field(default_factory=list)
    context_kind: str = "gold"


def outcome_of(closed_book_match: bool, context_match: bool) -> str:
    if context_match and not closed_book_match:
        return "context_only"
    if closed_book_match and context_match:
        return "both_right"
    if closed_book_match:
        return "closed_book_only"
    return "both_wrong"


def needs_retrieval(outcome: str, both_wrong: str = "no_need") -> bool | None:
    """The label of an outcome (module docstring); None for ``both_wrong`` under the ``exclude`` policy."""
    if outcome not in OUTCOMES:
        raise ValueError(f"Unknown labelling outcome {outcome!r}; one of {OUTCOMES}.")
    if both_wrong not in BOTH_WRONG_POLICIES:
        raise ValueError(f"--both-wrong takes one of {BOTH_WRONG_POLICIES}, got {both_wrong!r}.")
    if outcome == "both_wrong" and both_wrong == "exclude":
        return None
    return outcome == "context_only"


def retrievalqa_question_id(path: str | os.PathLike, question: str) -> str:
    return f"{Path(path).stem}:{hashlib.sha256(question.encode('utf-8')).hexdigest()[:12]}"


def _passages_of(documents, max_passages: int) -> list[str]:
    texts = []
    for document in documents[:max_passages]:
        title = str((document.meta or {}).get("title") or "").strip()
        body = (document.content or "").strip()
        if body:
            texts.append(f"{title}\n{body}" if title else body)
    return texts


def parse_position_range(text: str) -> tuple[int, int]:
    """``"100:400"`` -> (100, 400): 0-based positions of the task file, end excluded."""
    try:
        start, end = (int(part) for part in str(text).split(":"))
    except ValueError:
        raise ValueError(f"--nq-range takes START:END (0-based positions, end excluded), got {text!r}.") from None
    if start < 0 or end <= start:
        raise ValueError(f"--nq-range needs 0 <= START < END, got {text!r}.")
    return start, end


def nq_question_ids(ids_files: Sequence[str] = (), ranges: Sequence[str] = (), exclude_files: Sequence[str] = (),
                    dataset: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """The NQ-sample ids the files and position ranges name (in that order, each once), minus every id of the
    ``exclude_files`` (held-out questions); what was left out is counted in the returned description."""
    from icr2_components.evaluation.compare.splits import read_question_ids, resolve_question_ids
    from icr2_components.kilt.questions import dataset_question_ids

    available, _, path = dataset_question_ids(dataset)
    requested: list[str] = []
    for ids_file in ids_files:
        requested += read_question_ids(ids_file)
    for text in ranges:
        start, end = parse_position_range(text)
        requested += available[start:end]
    requested = list(dict.fromkeys(requested))
    excluded = set()
    for exclude_file in exclude_files:
        excluded |= set(read_question_ids(exclude_file))
    resolved = resolve_question_ids([i for i in requested if i not in excluded], available)
    described = {"dataset": path, "requested": len(requested), "excluded_held_out": len(requested) - len(resolved.found)
                 - len(resolved.unknown), "unknown": len(resolved.unknown), "unknown_examples": resolved.unknown[:5],
                 "ids": len(resolved.found)}
    return resolved.found, described


def nq_questions(ids: Sequence[str], dataset: str | None = None, index: str = "kilt-sample",
                 context: str = "gold", max_passages: int = DEFAULT_MAX_PASSAGES,
                 retrieval_method: str = "bm25") -> tuple[list[NeedQuestion], SkipReport]:
    """NQ-sample questions with their gold passages (as ``icr2 compare`` builds them) or retrieved ones; questions
    without a gold passage in the index's corpus are skipped and counted."""
    from icr2_components.kilt.questions import read_compare_questions

    if context not in CONTEXT_KINDS:
        raise ValueError(f"--context takes one of {CONTEXT_KINDS}, got {context!r}.")
    read, skips, _path = read_compare_questions(dataset, index=index, ids=list(ids))
    questions = []
    for item in read:
        if context == "gold":
            passages = _passages_of(item.gold_documents, max_passages)
        else:
            from icr2_components.stores import open_index

            passages = _passages_of(open_index(index).retrieve(item.query, method=retrieval_method,
                                                               top_k=max_passages), max_passages)
        if not passages:
            skips.skip(f"no {context} passage", None, item.id)
            continue
        questions.append(NeedQuestion(item.id, item.query, list(item.answers), "nq-sample", passages, context))
    return questions, skips


def retrievalqa_questions(path: str | os.PathLike, index: str | None = None, max_passages: int = DEFAULT_MAX_PASSAGES,
                          retrieval_method: str = "bm25", limit: int | None = None
                          ) -> tuple[list[NeedQuestion], SkipReport]:
    """A RetrievalQA-format JSONL: its own ``context`` as the gold passages; without one, the index's passages
    (``retrieved``), or the question is skipped and counted when no ``index`` is given."""
    records, skips = read_retrievalqa_jsonl(path, limit=limit)
    questions = []
    for record in records:
        passages, kind = list(record.context)[:max_passages], "gold"
        if not passages and index:
            from icr2_components.stores import open_index

            passages = _passages_of(open_index(index).retrieve(record.question, method=retrieval_method,
                                                               top_k=max_passages), max_passages)
            kind = "retrieved"
        if not passages:
            skips.skip("no context and no --index to retrieve one", None, record.question[:60])
            continue
        questions.append(NeedQuestion(retrievalqa_question_id(path, record.question), record.question,
                                      list(record.ground_truth), record.source, passages, kind))
    return questions, skips


def reader_for(model: str | None = "smollm2-135m-instruct", backend: str | None = None, max_new_tokens: int = 24,
               device: str | None = None) -> tuple[Any, str]:
    """The reader (a Haystack chat generator) and a key naming it (model, where it runs, answer budget): the
    in-process ``model``, or the backend file's model (``backends/*.yaml``: a served model or another local one)."""
    from icr2_components.backends.pipelines import component_class, resolve_backend

    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be a positive integer, got {max_new_tokens!r}.")
    from icr2_components.readers import LocalChatReader

    # the backend's kind decides what answers (a served kind: a ServedChatReader; a local one: its model)
    chosen = resolve_backend(backend) if backend else None
    model = (chosen.kind.local_model() if chosen is not None else None) or model
    entry = {"model": model, "max_new_tokens": max_new_tokens, "dtype": "float32", "device": device}
    variant = chosen.follow(LocalChatReader, entry) if chosen is not None else None
    if variant is None and not model:
        raise ValueError("Name a reader: --model (an alias, path or Hugging Face id) or --backend FILE.")
    reader_class = component_class(variant["type"]) if variant is not None else LocalChatReader
    reader = reader_class(**(variant["init_parameters"] if variant is not None else entry))
    label = chosen.kind.reader_label(model) if chosen is not None else f"local:{model}"
    return reader, f"{label}:max_new_tokens={max_new_tokens}"


def label_key(reader_key: str, question: NeedQuestion) -> str:
    passages = hashlib.sha256("\n\n".join(question.passages).encode("utf-8")).hexdigest()[:12]
    return f"{reader_key}|{question.id}|{question.context_kind}:{passages}"


def _reply(reader, messages) -> str:
    return (reader.run(messages=messages)["replies"][0].text or "").strip()


def _answer_both_ways(reader, question: NeedQuestion) -> tuple[str, str, list[float]]:
    start = time.perf_counter()
    closed = _reply(reader, closed_book_messages(question.question))
    middle = time.perf_counter()
    with_context = _reply(reader, context_messages(question.question, question.passages))
    return closed, with_context, [round(middle - start, 3), round(time.perf_counter() - middle, 3)]


def label_questions(questions: Sequence[NeedQuestion], reader, reader_key: str, out: str | os.PathLike,
                    both_wrong: str = "no_need", progress: bool = True, concurrency: int = 1) -> dict[str, Any]:
    """Answer each question closed-book and with its passages (skipping those ``out`` already holds), append one
    label line each to ``out``, and return (and write to ``<out>.counts.json``) the counts. ``concurrency``:
    questions answered at once by a served reader; the lines and their order are those of a sequential run. A
    question whose request fails through every retry is written as failed (``error``: no label, answered again
    by the next run) and counted in ``failed``; a run of such failures (the server is down) stops the run."""
    from tqdm.auto import tqdm

    from icr2_components.concurrency import FailureStreak, Job, ordered_calls, streak_limit
    from icr2_components.errors import find_in_causes
    from icr2_components.models.served_model import ServedModelError

    needs_retrieval("both_wrong", both_wrong)  # checks the policy before any answer
    cache = AnswerCache(out)
    if hasattr(reader, "warm_up"):
        reader.warm_up()
    answered = cached = failed = 0
    jobs = (Job(question, None if cache.done(label_key(reader_key, question))
                else partial(_answer_both_ways, reader, question)) for question in questions)
    outcomes = ordered_calls(jobs, concurrency, retry_if=lambda e: find_in_causes(e, ServedModelError) is not None)
    streak = FailureStreak(streak_limit(concurrency))
    started = time.perf_counter()
    with tqdm(total=len(questions), desc="label-retrieval-need", unit="q", disable=not progress) as bar:
        for outcome in outcomes:
            bar.update(1)
            question = outcome.key
            key = label_key(reader_key, question)
            if not outcome.ran:
                cached += 1
                continue
            if outcome.failed:
                if find_in_causes(outcome.error, ServedModelError) is None:
                    raise outcome.error
                cache.add({"key": key, "id": question.id, "question": question.question, "reader": reader_key,
                           "error": str(find_in_causes(outcome.error, ServedModelError)), "failed_request": True,
                           "attempts": outcome.attempts})
                failed += 1
                streak.observe(outcome)
                continue
            streak.observe(outcome)
            closed, with_context, seconds = outcome.value
            closed_match = answer_match(closed, question.answers)
            context_match = answer_match(with_context, question.answers)
            outcome_name = outcome_of(closed_match, context_match)
            cache.add({"key": key, "id": question.id, "question": question.question, "answers": question.answers,
                       "source": question.source, "context_kind": question.context_kind,
                       "passages": question.passages, "reader": reader_key, "closed_book_answer": closed,
                       "context_answer": with_context, "closed_book_match": closed_match,
                       "context_match": context_match, "outcome": outcome_name, "answer_seconds": seconds})
            answered += 1
            bar.set_postfix_str(f"{answered / (time.perf_counter() - started):.2f} questions/s", refresh=False)
    keys = {label_key(reader_key, q) for q in questions}
    records = [r for r in cache if r["key"] in keys and not r.get("error")]
    counts = outcome_counts(records, both_wrong)
    timed = [sum(r["answer_seconds"]) for r in records if r.get("answer_seconds")]
    result = {"out": str(out), "reader": reader_key, "questions": len(questions), "answered_now": answered,
              "mean_seconds_per_question": round(sum(timed) / len(timed), 2) if timed else None,
              "cached": cached, "failed": failed, "concurrency": concurrency, "both_wrong_policy": both_wrong,
              "counts": counts, "unreadable_cache_lines": cache.unreadable_lines}
    Path(f"{out}.counts.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def outcome_counts(records: Sequence[dict], both_wrong: str = "no_need") -> dict[str, dict[str, int]]:
    """Per source (and ``all``): each outcome's count and the labels they give (needs / no need / excluded)."""
    groups: dict[str, Counter] = {}
    for record in records:
        for source in (record["source"], "all"):
            counter = groups.setdefault(source, Counter())
            counter[record["outcome"]] += 1
            label = needs_retrieval(record["outcome"], both_wrong)
            counter["needs_retrieval" if label else "no_need" if label is False else "excluded"] += 1
            counter["questions"] += 1
    keys = ("questions", *OUTCOMES, "needs_retrieval", "no_need", "excluded")
    return {source: {k: int(counter.get(k, 0)) for k in keys} for source, counter in sorted(groups.items())
            if source != "all"} | ({"all": {k: int(groups["all"].get(k, 0)) for k in keys}} if "all" in groups else {})


@dataclass
class LabelledQuestion:
    """A label line as training and evaluation read it."""

    id: str
    question: str
    source: str
    closed_book_match: bool
    context_match: bool
    outcome: str
    needs_retrieval: bool | None
    reader: str


#: the declared type of each field a label line must have (read through the same typed checker as every record)
LABEL_TYPES: dict[str, Any] = {"key": str, "id": str, "question": str, "answers": list[str], "source": str,
                               "closed_book_match": bool, "context_match": bool,
                               "outcome": Literal["context_only", "both_right", "closed_book_only", "both_wrong"],
                               "reader": str}


def read_label_file(path: str | os.PathLike, skips: SkipReport) -> list[dict]:
    """The typed label lines of one file, in order; a garbage line (bad JSON, a wrongly typed field such as
    ``closed_book_match: "false"``, whose ``bool()`` is True; a line without the label fields) is counted in
    ``skips`` with its line number, never read as a label. A file none of whose lines is a label is an error."""
    records = []
    before = skips.total
    for line_number, raw in iter_jsonl(path, skips):
        if raw.get("failed_request"):  # its requests failed through every retry: no label yet (a re-run answers it)
            skips.skip("failed request, no label yet", line_number, raw.get("error"))
            continue
        missing = [f for f in LABEL_TYPES if f not in raw]
        if missing:
            skips.skip("not a label line", line_number, f"lacks {missing}")
            continue
        try:
            for name, expected in LABEL_TYPES.items():
                check_type(raw[name], expected, name)
        except TypeCheckError as error:
            skips.skip("wrongly typed field", line_number, str(error))
            continue
        if raw["outcome"] != outcome_of(raw["closed_book_match"], raw["context_match"]):
            skips.skip("outcome disagrees with the matches", line_number,
                       f"outcome {raw['outcome']!r} but closed_book_match {raw['closed_book_match']} and "
                       f"context_match {raw['context_match']}")
            continue
        records.append(raw)
    if not records and skips.total > before:
        raise ValueError(f"{path}: no line is a label of icr2 label-retrieval-need ({skips.summary()}); it is not a "
                         "label file.")
    return records


def read_labels(paths: Sequence[str | os.PathLike], both_wrong: str = "no_need") -> tuple[list[LabelledQuestion], dict]:
    """Label lines of one or more files (the last line of a key wins), each question id once. Refuses files that
    mix readers (labels of one reader say nothing of another's need) or a question labelled twice differently.
    Garbage lines are counted per reason in the description's ``skips`` (and ``unreadable_lines``), not read."""
    records: dict[str, dict] = {}
    skips = SkipReport(source=", ".join(map(str, paths)))
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"Labels file not found: {path}. Write it with icr2 label-retrieval-need.")
        by_key: dict[str, dict] = {}
        for record in read_label_file(path, skips):
            by_key[record["key"]] = record
        for record in by_key.values():
            previous = records.get(record["id"])
            if previous is not None and previous["key"] != record["key"]:
                raise ValueError(f"Question {record['id']} is labelled twice (with other passages or another reader) "
                                 f"in {list(map(str, paths))}; keep one labelling per question.")
            records[record["id"]] = record
    readers = sorted({r["reader"] for r in records.values()})
    if len(readers) > 1:
        raise ValueError(f"The labels mix readers {readers}; need is per reader: train and evaluate on one reader's "
                         "labels.")
    labelled = [LabelledQuestion(r["id"], r["question"], r["source"], r["closed_book_match"],
                                 r["context_match"], r["outcome"], needs_retrieval(r["outcome"], both_wrong),
                                 r["reader"]) for r in records.values()]
    return labelled, {"files": [str(p) for p in paths], "questions": len(labelled), "reader": readers[0] if readers
                      else None, "unreadable_lines": skips.total, "skips": skips.as_dict(),
                      "skipped": skips.summary(),
                      "counts": outcome_counts(list(records.values()), both_wrong)}


__all__ = [
    "BOTH_WRONG_POLICIES",
    "CONTEXT_KINDS",
    "OUTCOMES",
    "LabelledQuestion",
    "NeedQuestion",
    "label_questions",
    "needs_retrieval",
    "nq_question_ids",
    "nq_questions",
    "outcome_counts",
    "outcome_of",
    "parse_position_range",
    "read_label_file",
    "read_labels",
    "reader_for",
    "retrievalqa_question_id",
    "retrievalqa_questions",
]
