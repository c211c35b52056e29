"""Questions for ``icr2 compare``: a KILT task file (default: the bundled NQ sample) or an ICR2 benchmark JSONL.

Each question carries its gold answers, its gold passages and the candidates its irrelevant context is drawn
from (KILT: BM25 passages retrieved from the index; ICR2: the record's non-gold context passages). Questions
without answers are counted under ``missing answers`` and left out; so are lines the readers skip.

``ids`` (any reader here) chooses the questions by id instead of by ``limit``: only those are built (a KILT
question's gold passages and BM25 candidates cost an index lookup each), returned in the order of ``ids``; a
repeated question id in the file is counted under ``repeated question id`` and only its first occurrence used.
:func:`dataset_question_ids` lists the usable ids of a file cheaply (no index, no retrieval), for splitting.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from haystack import Document

from icr2_components.records import SkipReport


@dataclass
class CompareQuestion:
    id: str
    query: str
    answers: list[str]
    gold_documents: list[Document] = field(default_factory=list)
    irrelevant_candidates: list[Document] = field(default_factory=list)
    task_type: str = "qa"
    # an ICR2 benchmark record's whole corpus in context (gold among confounders, in the record's order): what
    # compare's ``corpus`` context type gives; None for a KILT task file
    corpus: list[Document] | None = None


def is_icr2_file(path: str | os.PathLike) -> bool:
    """True when the first JSON line has the ICR2 fields (``query``, ``context``, ``gold_passage_ids``)."""
    from icr2_components.records import open_text

    with open_text(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(record, dict) and {"query", "context", "gold_passage_ids"} <= set(record)
    return False


def _ordered(items: list, ids: Sequence[str] | None) -> list:
    """``items`` (each with an ``id``) in the order of ``ids`` (all of them when ``ids`` is None)."""
    if ids is None:
        return items
    by_id = {item.id: item for item in items}
    return [by_id[i] for i in ids if i in by_id]


def read_icr2_questions(path: str | os.PathLike, skips: SkipReport, limit: int | None = None,
                        ids: Sequence[str] | None = None) -> list[CompareQuestion]:
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

    questions = []
    wanted, seen = (set(ids) if ids is not None else None), set()
    for instance in read_icr2_benchmark(path, skips=skips):
        if limit is not None and len(questions) >= limit:
            break
        if not [a for a in instance.answers if str(a).strip()]:
            skips.skip("missing answers", None, instance.id)
            continue
        if instance.id in seen:
            skips.skip("repeated question id", None, instance.id)
            continue
        seen.add(instance.id)
        if wanted is not None and instance.id not in wanted:
            continue
        gold = instance.gold_documents()
        gold_ids = {d.id for d in gold}
        others = [d for d in instance.documents() if d.id not in gold_ids]
        questions.append(CompareQuestion(instance.id, instance.query, list(instance.answers), gold, others,
                                         instance.task_type, corpus=instance.documents()))
    return _ordered(questions, ids)


def read_kilt_questions(
    path: str | os.PathLike,
    skips: SkipReport,
    limit: int | None = None,
    index: str = "kilt-sample",
    retrieve: Callable[[str], list[Document]] | None = None,
    irrelevant_top_k: int = 10,
    ids: Sequence[str] | None = None,
) -> list[CompareQuestion]:
    """KILT tasks with their gold passages (provenance -> passages of the index's corpus) and BM25 candidates."""
    from icr2_components.kilt import read_kilt_tasks
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup, infer_task_type
    from icr2_components.stores import open_index
    from icr2_components.stores.config import corpus_path

    tasks = []
    wanted, seen = (set(ids) if ids is not None else None), set()
    for task in read_kilt_tasks(path, skips=skips):
        if limit is not None and len(tasks) >= limit:
            break
        if not task.answers:
            skips.skip("missing answers", None, task.id)
            continue
        if task.id in seen:
            skips.skip("repeated question id", None, task.id)
            continue
        seen.add(task.id)
        if wanted is None or task.id in wanted:
            tasks.append(task)
    tasks = _ordered(tasks, ids)
    handle = open_index(index)
    lookup = GoldPassageLookup.from_knowledge_source(
        corpus_path(handle.config), wikipedia_ids={p.wikipedia_id for t in tasks for p in t.provenance},
        passage_words=handle.config.corpus.passage_words,
    )
    retrieve = retrieve or (lambda query: handle.retrieve(query, method="bm25", top_k=irrelevant_top_k))
    task_type = infer_task_type(path)
    return [CompareQuestion(t.id, t.input, list(t.answers), lookup(t), retrieve(t.input), task_type) for t in tasks]


def answer_pool(path: str | os.PathLike) -> list[str]:
    """Every answer string of the whole file (the substitutes of conflicting contexts are drawn from it)."""
    from icr2_components.records import iter_jsonl

    pool: set[str] = set()
    for _, record in iter_jsonl(path, SkipReport(source=str(path))):
        if not isinstance(record, dict):
            continue
        answers = record.get("answers")
        if answers is None:
            answers = [o.get("answer") for o in record.get("output") or [] if isinstance(o, dict)]
        pool.update(a for a in answers or [] if isinstance(a, str) and a.strip())
    return sorted(pool)


def resolve_dataset(path: str | os.PathLike | None) -> str:
    """The dataset path (the bundled NQ sample when None), checked to exist."""
    if path is None:
        from icr2_components.kilt import build_sample

        path = build_sample().tasks
    if not Path(path).exists():
        raise FileNotFoundError(f"Dataset not found: {path}. Pass a KILT task file or an ICR2 benchmark JSONL.")
    return str(path)


def read_compare_questions(
    path: str | os.PathLike | None, limit: int | None = None, index: str = "kilt-sample",
    ids: Sequence[str] | None = None,
) -> tuple[list[CompareQuestion], SkipReport, str]:
    """Read either format; returns the questions, the skips and the path read (the bundled NQ sample by default).
    With ``ids``, exactly those questions the file has, in that order (``limit`` then does not apply)."""
    path = resolve_dataset(path)
    if ids is not None:
        limit = None
    skips = SkipReport(source=str(path))
    if is_icr2_file(path):
        questions = read_icr2_questions(path, skips, limit, ids=ids)
    else:
        questions = read_kilt_questions(path, skips, limit, index=index, ids=ids)
    return questions, skips, str(path)


def dataset_question_ids(path: str | os.PathLike | None) -> tuple[list[str], SkipReport, str]:
    """The ids of every usable question (with answers; first occurrence of a repeated id) in file order, without
    building passages: what a split is made of. Returns the ids, the skips and the path read."""
    path = resolve_dataset(path)
    skips = SkipReport(source=str(path))
    if is_icr2_file(path):
        from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

        items = ((i.id, [a for a in i.answers if str(a).strip()]) for i in read_icr2_benchmark(path, skips=skips))
    else:
        from icr2_components.kilt import read_kilt_tasks

        items = ((t.id, t.answers) for t in read_kilt_tasks(path, skips=skips))
    ids: list[str] = []
    seen: set[str] = set()
    for question_id, answers in items:
        if not answers:
            skips.skip("missing answers", None, question_id)
        elif question_id in seen:
            skips.skip("repeated question id", None, question_id)
        else:
            seen.add(question_id)
            ids.append(question_id)
    return ids, skips, path
