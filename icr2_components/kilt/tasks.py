"""KILT task files (``id``, ``input``, ``output[answer, provenance]``) and provenance-to-passage mapping."""

from __future__ import annotations

import os
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from haystack import Document

from icr2_components.kilt.chunking import Passage, spans_overlap
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl

# A provenance without paragraph ids names the whole article.
_WHOLE_ARTICLE = ((0, 0), (1 << 30, 0))


@dataclass(frozen=True)
class Provenance:
    wikipedia_id: str
    title: str = ""
    start_paragraph_id: int | None = None
    start_character: int | None = None
    end_paragraph_id: int | None = None
    end_character: int | None = None

    def span(self) -> tuple[tuple[int, int], tuple[int, int]]:
        if self.start_paragraph_id is None:
            return _WHOLE_ARTICLE
        start_char = self.start_character if self.start_character is not None and self.start_character >= 0 else 0
        end_paragraph = self.end_paragraph_id if self.end_paragraph_id is not None else self.start_paragraph_id
        if self.end_character is None or self.end_character < 0:
            # unknown end character: the whole end paragraph
            return (self.start_paragraph_id, start_char), (end_paragraph + 1, 0)
        return (self.start_paragraph_id, start_char), (end_paragraph, max(self.end_character, start_char + 1))

    @classmethod
    def from_dict(cls, record: dict) -> Provenance:
        if "wikipedia_id" not in record:
            raise KeyError("wikipedia_id")

        def opt_int(name: str) -> int | None:
            value = record.get(name)
            return None if value is None else int(value)

        return cls(
            wikipedia_id=str(record["wikipedia_id"]),
            title=str(record.get("title", "")),
            start_paragraph_id=opt_int("start_paragraph_id"),
            start_character=opt_int("start_character"),
            end_paragraph_id=opt_int("end_paragraph_id"),
            end_character=opt_int("end_character"),
        )


@dataclass
class KiltTask:
    """One KILT instance: the query, its accepted answers and the provenance that supports them."""

    id: str
    input: str
    answers: list[str] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)


def read_kilt_tasks(
    path: str | os.PathLike, skips: SkipReport | None = None, limit: int | None = None
) -> Iterator[KiltTask]:
    """Stream the instances of a KILT task file; malformed lines and records missing fields are counted."""
    skips = skips if skips is not None else SkipReport(source=str(path))
    count = 0
    for line_number, record in iter_jsonl(path, skips):
        if limit is not None and count >= limit:
            return
        if "id" not in record or "input" not in record:
            skips.skip("missing fields", line_number, "id/input")
            continue
        if not isinstance(record["input"], str) or not record["input"].strip():
            skips.skip("empty input", line_number)
            continue
        answers: list[str] = []
        provenance: list[Provenance] = []
        bad_provenance = 0
        for output in record.get("output") or []:
            if not isinstance(output, dict):
                skips.skip("output entry is not an object", line_number, str(record["id"]))
                continue
            answer = output.get("answer")
            if answer is not None and not isinstance(answer, str):
                skips.skip("answer is not a string", line_number, f"{record['id']}: {answer!r}"[:100])
            elif isinstance(answer, str) and answer.strip() and answer not in answers:
                answers.append(answer)
            for prov in output.get("provenance") or []:
                try:
                    item = Provenance.from_dict(prov)
                except (KeyError, TypeError, ValueError):
                    bad_provenance += 1
                    continue
                if item not in provenance:
                    provenance.append(item)
        if bad_provenance:
            skips.skip("provenance entries without wikipedia_id", line_number, f"{bad_provenance} in {record['id']}")
        count += 1
        yield KiltTask(id=str(record["id"]), input=record["input"], answers=answers, provenance=provenance)


class PassageSpanIndex:
    """Maps provenance spans to the ids of the passages that overlap them.

    Holds only (start, end, id) per passage, grouped by article and sorted, so a lookup is a bisect.

    Usage:
        >>> index = PassageSpanIndex.from_documents(documents)
        >>> index.gold_passage_ids(task.provenance)
    """

    def __init__(self) -> None:
        self._spans: dict[str, list[tuple[tuple[int, int], tuple[int, int], str]]] = defaultdict(list)
        self._sorted = True

    def add(self, wikipedia_id: str, start: tuple[int, int], end: tuple[int, int], passage_id: str) -> None:
        self._spans[str(wikipedia_id)].append((start, end, passage_id))
        self._sorted = False

    def add_passage(self, passage: Passage) -> None:
        self.add(
            passage.wikipedia_id,
            (passage.start_paragraph_id, passage.start_character),
            (passage.end_paragraph_id, passage.end_character),
            passage.id,
        )

    def add_document(self, document: Document) -> None:
        meta = document.meta
        try:
            self.add(
                meta["wikipedia_id"],
                (int(meta["start_paragraph_id"]), int(meta["start_character"])),
                (int(meta["end_paragraph_id"]), int(meta["end_character"])),
                document.id,
            )
        except KeyError as error:
            raise ValueError(
                f"Document {document.id} has no KILT provenance meta ({error}); index it with `icr2 index`."
            ) from error

    @classmethod
    def from_documents(cls, documents: Iterable[Document]) -> PassageSpanIndex:
        index = cls()
        for document in documents:
            index.add_document(document)
        return index

    @classmethod
    def from_passages(cls, passages: Iterable[Passage]) -> PassageSpanIndex:
        index = cls()
        for passage in passages:
            index.add_passage(passage)
        return index

    def _ensure_sorted(self) -> None:
        if not self._sorted:
            for spans in self._spans.values():
                spans.sort()
            self._sorted = True

    def overlapping(self, provenance: Provenance) -> list[str]:
        self._ensure_sorted()
        spans = self._spans.get(provenance.wikipedia_id, [])
        start, end = provenance.span()
        # passages are sorted by start; only those starting before the span's end can overlap
        cut = bisect_right(spans, (end, (0, 0), ""))
        return [pid for p_start, p_end, pid in spans[:cut] if spans_overlap(p_start, p_end, start, end)]

    def gold_passage_ids(self, provenance: Iterable[Provenance]) -> list[str]:
        ids: list[str] = []
        for item in provenance:
            for pid in self.overlapping(item):
                if pid not in ids:
                    ids.append(pid)
        return ids

    def __len__(self) -> int:
        return sum(len(spans) for spans in self._spans.values())
