"""Reading ICR2 benchmark files (``icr2 build-benchmark``'s JSONL) and mapping KILT provenance to gold passages.

A record::

    {"id", "query", "answers", "task_type", "context": [{"passage_id", "doc_id", "title", "text", "origin"}],
     "gold_passage_ids": ["PSG017"], ...}

Ground floor: the builder writes these files, and evaluation, training and probing read them, so the reader
lives below all of them. Malformed records are counted in a :class:`SkipReport`, never dropped silently.

Usage:
    >>> from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
    >>> for instance in read_icr2_benchmark("benchmark.jsonl"):
    ...     instance.query, instance.gold_documents()
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.kilt.knowledge_source import KiltKnowledgeSource
from icr2_components.kilt.tasks import KiltTask, PassageSpanIndex
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.strict_mapping import TypeCheckError, check_type
from icr2_components.text.templates import TASK_TYPES

REQUIRED_FIELDS = ("id", "query", "answers", "task_type", "context", "gold_passage_ids")


def infer_task_type(path: str | os.PathLike) -> str:
    """Guess the ICR2 task type from a KILT file name (fever -> fact verification, wow -> dialogue, else qa)."""
    name = Path(path).name.lower()
    if "fever" in name:
        return "fact_verification"
    if "wow" in name or "wizard" in name:
        return "dialogue"
    return "qa"


class GoldPassageLookup:
    """Maps a task's provenance to its gold passages (the passages overlapping any provenance span).

    Usage:
        >>> lookup = GoldPassageLookup.from_knowledge_source(corpus_path, wikipedia_ids={"90000012"})
        >>> lookup(task)   # [Document(id="90000012-w100-00000", ...)]
    """

    def __init__(self, documents: Iterable[Document]) -> None:
        self._by_id: dict[str, Document] = {}
        self._spans = PassageSpanIndex()
        for document in documents:
            self._by_id[document.id] = document
            self._spans.add_document(document)

    @classmethod
    def from_knowledge_source(
        cls, path: str | os.PathLike, wikipedia_ids: set[str] | None = None, passage_words: int = 100
    ) -> GoldPassageLookup:
        """Read the passages of the articles named (all when ``wikipedia_ids`` is None), one article at a time."""
        source = KiltKnowledgeSource(path, passage_words=passage_words)
        documents = source.documents()
        if wikipedia_ids is not None:
            documents = (d for d in documents if d.meta["wikipedia_id"] in wikipedia_ids)
        return cls(documents)

    def __call__(self, task: KiltTask) -> list[Document]:
        return [self._by_id[pid] for pid in self._spans.gold_passage_ids(task.provenance)]

    def __len__(self) -> int:
        return len(self._by_id)


def record_documents(record: Mapping[str, Any]) -> list[Document]:
    """The context of a record as Documents (meta passage_id, title, origin), in record order."""
    return [
        Document(
            id=item["doc_id"],
            content=item["text"],
            meta={"passage_id": item["passage_id"], "title": item.get("title", ""), "origin": item.get("origin", "")},
        )
        for item in record["context"]
    ]


@dataclass
class ICR2Instance:
    """One record of an ICR2 benchmark file."""

    id: str
    query: str
    answers: list[str]
    task_type: str
    context: list[dict[str, Any]]
    gold_passage_ids: list[str]
    record: dict[str, Any]

    def documents(self) -> list[Document]:
        return record_documents(self.record)

    def gold_documents(self) -> list[Document]:
        wanted = set(self.gold_passage_ids)
        return [d for d in self.documents() if d.meta["passage_id"] in wanted]


# the declared types of an ICR2 record's fields (``id`` may be a number in files written by other tools)
_FIELD_TYPES = {
    "id": str | int,
    "query": str,
    "answers": list[str],
    "task_type": str,
    "context": list,
    "gold_passage_ids": list[str],
}

# the declared types of the fields of a passage in a record's ``context``
_CONTEXT_FIELD_TYPES = {
    "passage_id": str | int,
    "doc_id": str | int,
    "text": str,
    "title": str | None,
}


def read_icr2_benchmark(
    path: str | os.PathLike, skips: SkipReport | None = None, limit: int | None = None
) -> Iterator[ICR2Instance]:
    """Stream an ICR2 JSONL file; malformed lines and records missing fields are counted in ``skips``."""
    skips = skips if skips is not None else SkipReport(source=str(path))
    count = 0
    for line_number, record in iter_jsonl(path, skips):
        if limit is not None and count >= limit:
            return
        missing = [name for name in REQUIRED_FIELDS if name not in record]
        if missing:
            skips.skip("missing fields", line_number, ", ".join(missing))
            continue
        try:
            for name, expected in _FIELD_TYPES.items():
                check_type(record[name], expected, name)
        except TypeCheckError as error:
            skips.skip("wrongly typed field", line_number, str(error))
            continue
        if record["task_type"] not in TASK_TYPES:
            skips.skip("unknown task_type", line_number, str(record["task_type"]))
            continue
        context = record["context"]
        if not isinstance(context, list) or any(
            not isinstance(item, dict) or not {"passage_id", "doc_id", "text"} <= set(item) for item in context
        ):
            skips.skip("malformed context", line_number, record.get("id", ""))
            continue
        try:  # each passage's fields as declared: a list for an id, or a number for a text, is not a passage
            for position, item in enumerate(context):
                for name, expected in _CONTEXT_FIELD_TYPES.items():
                    if name in item or name in ("passage_id", "doc_id", "text"):
                        check_type(item[name], expected, f"context[{position}].{name}")
        except TypeCheckError as error:
            skips.skip("malformed context", line_number, str(error))
            continue
        shown = {item["passage_id"] for item in context}
        if not set(record["gold_passage_ids"]) <= shown:
            skips.skip("gold passage id not in the context", line_number, record["id"])
            continue
        count += 1
        yield ICR2Instance(
            id=str(record["id"]),
            query=record["query"],
            answers=list(record["answers"]),
            task_type=record["task_type"],
            context=context,
            gold_passage_ids=list(record["gold_passage_ids"]),
            record=record,
        )


__all__ = ["GoldPassageLookup", "ICR2Instance", "infer_task_type", "read_icr2_benchmark", "record_documents"]
