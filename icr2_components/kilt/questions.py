"""Questions for ``icr2 compare``: a KILT task file (default: the bundled NQ sample), an ICR2 benchmark JSONL, or a
question set in a user's own format (JSON lines, CSV, Parquet, a saved ``datasets`` dataset; ``question_sets``).

Each question carries its gold answers, its gold passages and the candidates its irrelevant context is drawn
from (KILT: BM25 passages retrieved from the index; ICR2: the record's non-gold context passages). KILT and ICR2
questions without answers are counted under ``missing answers`` and left out; so are lines the readers skip. A
question set's questions are kept with or without answers (each metric is computed where its inputs exist); their
gold passages are looked up by id in the index, their irrelevant candidates retrieved from it (BM25) for the
questions with answers.

``ids`` (any reader here) chooses the questions by id instead of by ``limit``: only those are built (a KILT
question's gold passages and BM25 candidates cost an index lookup each), returned in the order of ``ids``; a
repeated question id in the file is counted under ``repeated question id`` and only its first occurrence used.
:func:`dataset_question_ids` lists the usable ids of a file cheaply (no index, no retrieval), for splitting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from haystack import Document

from icr2_components.kilt.question_sets import QuestionSet, read_question_rows
from icr2_components.records import SkipReport

#: the formats ``--dataset-format`` takes: the two benchmark formats and the question-set formats
DATASET_FORMATS = ("kilt", "icr2", "jsonl", "csv", "parquet", "hf_dataset")


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
    # a question set's own conflicting answer (CUB's conflicting context); None: drawn from the set's answers
    conflicting_answer: str | None = None
    # gold passage ids the question set names that the index does not hold (left out of gold_documents)
    missing_gold_ids: list[str] = field(default_factory=list)
    # the documents a question set says hold the answer (``gold_sources``); their answer-bearing passages are gold
    gold_sources: list[str] = field(default_factory=list)


def is_icr2_file(path: str | os.PathLike) -> bool:
    """True when the first JSON line has the ICR2 fields (``query``, ``context``, ``gold_passage_ids``)."""
    record = _first_record(path)
    return record is not None and {"query", "context", "gold_passage_ids"} <= set(record)


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
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup, infer_task_type
    from icr2_components.kilt.tasks import read_kilt_tasks
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


def answer_pool(path: str | os.PathLike | QuestionSet) -> list[str]:
    """Every answer string of the whole file (the substitutes of conflicting contexts are drawn from it)."""
    from icr2_components.records.reading import iter_jsonl

    if isinstance(path, QuestionSet):
        rows, _ = read_question_rows(path, SkipReport(source=path.path))
        return sorted({a for row in rows for a in row.answers})
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


def _first_record(path: str | os.PathLike) -> dict | None:
    from icr2_components.records.reading import open_text

    with open_text(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return record if isinstance(record, dict) else None
    return None


def question_source(dataset: str | os.PathLike | QuestionSet | None, format: str | None = None,
                    fields: dict[str, str | None] | None = None, split: str | None = None
                    ) -> str | QuestionSet:
    """What ``--dataset`` names: the path of a KILT task file or ICR2 benchmark JSONL (read as today), or a
    :class:`QuestionSet`. ``format`` None: a ``.yaml`` question-set file; a folder (``datasets``' ``save_to_disk``),
    ``.csv``/``.tsv`` or ``.parquet``; JSON lines whose first record has ICR2's fields (ICR2) or KILT's ``input``
    (KILT), else a JSON-lines question set; a name that is no file but a shipped question set
    (``icr2_components.resources``, kind ``questions``). ``fields``/``split`` apply to a question set only."""
    if isinstance(dataset, QuestionSet):
        if format or fields or split:
            raise ValueError("A QuestionSet carries its own format, fields and split; pass them to it.")
        return dataset
    if dataset is None:
        if format or fields or split:
            raise ValueError("--dataset-format, --field and --dataset-split describe a --dataset: name one.")
        return resolve_dataset(None)
    if format is not None and format not in DATASET_FORMATS:
        raise ValueError(f"--dataset-format takes one of {', '.join(DATASET_FORMATS)}, got {format!r}.")
    path = Path(dataset)
    if not path.exists():
        from icr2_components.resources import shipped_file
        from icr2_components.resources.lookup import is_shipped_name

        if is_shipped_name("questions", str(dataset)):
            path = shipped_file("questions", str(dataset))
        else:
            raise FileNotFoundError(f"Dataset not found: {dataset}. Pass a KILT task file, an ICR2 benchmark JSONL, "
                                    "a question set (JSONL, CSV, Parquet, a saved `datasets` folder, a question-set "
                                    "YAML) or a shipped question-set name.")
    if format is None and path.suffix.lower() in (".yaml", ".yml"):
        if fields or split:
            raise ValueError(f"{path} is a question-set file: set fields and split in it, not with --field or "
                             "--dataset-split.")
        return QuestionSet.from_file(path).check_columns()
    if format in ("kilt", "icr2") or (format is None and path.is_file()
                                       and path.suffix.lower() not in (".csv", ".tsv", ".parquet")):
        kind = format
        if kind is None:
            first = _first_record(path)
            kind = ("icr2" if is_icr2_file(path) else "kilt" if first is None or "input" in first else None)
        if kind is not None:
            if fields or split:
                raise ValueError(f"{path} is read as a {kind.upper()} file, whose fields are fixed; --field and "
                                 "--dataset-split are for question sets (--dataset-format jsonl|csv|parquet|"
                                 "hf_dataset).")
            if kind == "icr2" and not is_icr2_file(path):
                raise ValueError(f"{path} is not an ICR2 benchmark JSONL (its first record lacks query, context, "
                                 "gold_passage_ids).")
            return str(path)
        format = "jsonl"
    return QuestionSet.from_options(path, format, fields, split).check_columns()


def dataset_label(source: str | QuestionSet) -> str:
    """The path a report names for a dataset."""
    return source.path if isinstance(source, QuestionSet) else str(source)


def fetch_documents(index: str, ids: Sequence[str]) -> dict[str, Document]:
    """The passages of ``index`` with these ids (one filter query), by id; ids the index lacks are absent."""
    from icr2_components.stores import open_index

    if not ids:
        return {}
    store = open_index(index).document_store
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Document] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for document in store.filter_documents({"field": "id", "operator": "in", "value": chunk}):
            found[document.id] = document
    return found


def fetch_source_documents(index: str, meta_field: str, sources: Sequence[str]) -> dict[str, list[Document]]:
    """The passages of ``index`` whose ``meta_field`` is one of ``sources``, by source, in the index's order."""
    from icr2_components.stores import open_index

    if not sources:
        return {}
    store = open_index(index).document_store
    found: dict[str, list[Document]] = {}
    wanted = list(dict.fromkeys(sources))
    for document in store.filter_documents({"field": f"meta.{meta_field}", "operator": "in", "value": wanted}):
        found.setdefault(str(document.meta.get(meta_field)), []).append(document)
    for passages in found.values():
        passages.sort(key=lambda d: d.id)
    return found


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``answers`` (the looser normalisation CUB's contexts are built with)."""
    from icr2_components.text.normalization import normalize_text

    normalized = f" {normalize_text(text)} "
    return any(f" {normalize_text(a)} " in normalized for a in answers if normalize_text(a))


def read_question_set_questions(
    questions: QuestionSet, skips: SkipReport, limit: int | None = None, index: str = "kilt-sample",
    ids: Sequence[str] | None = None, retrieve: Callable[[str], list[Document]] | None = None,
    irrelevant_top_k: int = 10,
) -> list[CompareQuestion]:
    """A question set's questions, with or without answers: gold passages by id from ``index`` (an id it lacks is
    kept in ``missing_gold_ids``) and, for a question with answers, its gold sources' passages that contain one
    (``fetch_source_documents``, ``contains_answer``); BM25 candidates for the irrelevant context of those with
    answers. The index is opened only when some question has answers, gold passage ids or gold sources."""
    rows, _ = read_question_rows(questions, skips)
    rows = (rows[:limit] if limit is not None else rows) if ids is None else _ordered(rows, ids)
    if not any(r.answers or r.gold_passage_ids or r.gold_sources for r in rows):
        return [CompareQuestion(r.id, r.question, [], task_type=questions.task_type) for r in rows]
    documents = fetch_documents(index, [g for r in rows for g in r.gold_passage_ids])
    by_source = fetch_source_documents(index, questions.source_meta_field,
                                       [s for r in rows if r.answers for s in r.gold_sources])
    if retrieve is None:
        from icr2_components.stores import open_index

        handle = open_index(index)
        retrieve = lambda query: handle.retrieve(query, method="bm25", top_k=irrelevant_top_k)  # noqa: E731
    made = []
    for r in rows:
        gold = [documents[g] for g in r.gold_passage_ids if g in documents]
        missing = [g for g in r.gold_passage_ids if g not in documents]
        if r.answers:  # a gold source's passages that hold a gold answer
            gold += [d for s in r.gold_sources for d in by_source.get(s, [])
                     if d.id not in {g.id for g in gold} and contains_answer(d.content or "", r.answers)]
        candidates = retrieve(r.question) if r.answers else []
        made.append(CompareQuestion(r.id, r.question, list(r.answers), gold, candidates, questions.task_type,
                                    conflicting_answer=r.conflicting_answer, missing_gold_ids=missing,
                                    gold_sources=list(r.gold_sources)))
    return made


def describe_question_source(source: str | QuestionSet, questions: Sequence[CompareQuestion]) -> dict:
    """What a report records of a question set (None for a KILT or ICR2 file): where and how it was read, and how
    many of the run's questions have each optional field (what each metric can be computed on)."""
    if not isinstance(source, QuestionSet):
        return {"format": "icr2" if is_icr2_file(source) else "kilt"}
    missing = [g for q in questions for g in q.missing_gold_ids]
    return {**source.describe(),
            "run_questions": {"questions": len(questions), "with_answers": sum(bool(q.answers) for q in questions),
                              "with_gold_passages": sum(bool(q.gold_documents) for q in questions),
                              "with_gold_sources": sum(bool(q.gold_sources) for q in questions),
                              "with_conflicting_answer": sum(q.conflicting_answer is not None for q in questions)},
            "gold_passage_ids_not_in_index": len(missing), "gold_passage_ids_not_in_index_examples": missing[:5]}


def read_compare_questions(
    path: str | os.PathLike | QuestionSet | None, limit: int | None = None, index: str = "kilt-sample",
    ids: Sequence[str] | None = None,
) -> tuple[list[CompareQuestion], SkipReport, str | QuestionSet]:
    """Read any format (:func:`question_source`); returns the questions, the skips and what was read (the path
    of a KILT or ICR2 file, the bundled NQ sample by default; a :class:`QuestionSet` as is). With ``ids``,
    exactly those questions the file has, in that order (``limit`` then does not apply)."""
    source = question_source(path)
    if ids is not None:
        limit = None
    skips = SkipReport(source=dataset_label(source))
    if isinstance(source, QuestionSet):
        return read_question_set_questions(source, skips, limit, index=index, ids=ids), skips, source
    if is_icr2_file(source):
        questions = read_icr2_questions(source, skips, limit, ids=ids)
    else:
        questions = read_kilt_questions(source, skips, limit, index=index, ids=ids)
    return questions, skips, str(source)


def dataset_question_ids(path: str | os.PathLike | QuestionSet | None
                         ) -> tuple[list[str], SkipReport, str | QuestionSet]:
    """The ids of every usable question (KILT, ICR2: with answers; a question set: every readable row; the first
    occurrence of a repeated id) in file order, without building passages: what a split is made of. Returns the
    ids, the skips and what was read (:func:`read_compare_questions`)."""
    source = question_source(path)
    skips = SkipReport(source=dataset_label(source))
    if isinstance(source, QuestionSet):
        rows, _ = read_question_rows(source, skips)
        return [r.id for r in rows], skips, source
    path = source
    if is_icr2_file(path):
        from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

        items = ((i.id, [a for a in i.answers if str(a).strip()]) for i in read_icr2_benchmark(path, skips=skips))
    else:
        from icr2_components.kilt.tasks import read_kilt_tasks

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
