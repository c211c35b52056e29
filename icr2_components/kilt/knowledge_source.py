"""Streaming reader of the KILT knowledge source (one JSON article per line) into passages.

Memory stays flat however large the file: one article is held at a time. Bad lines are counted in a
:class:`SkipReport` (malformed JSON with its line number, missing fields, articles with no text) and the rest
goes on.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path
from typing import Iterator

from haystack import Document

from icr2_components.kilt.chunking import Passage, chunk_article
from icr2_components.kilt.skips import SkipReport


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a plain or gzip-compressed text file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such file: {path}")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(path: str | os.PathLike, skips: SkipReport) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every valid JSON object line; count the rest."""
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                skips.skip("malformed JSON", line_number, str(error))
                continue
            if not isinstance(record, dict):
                skips.skip("not a JSON object", line_number)
                continue
            yield line_number, record


class KiltKnowledgeSource:
    """Iterate the passages of a KILT knowledge-source file.

    Usage:
        >>> source = KiltKnowledgeSource("kilt_knowledgesource.json", passage_words=100)
        >>> for passage in source.passages():
        ...     ...
        >>> print(source.skips.summary())
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        passage_words: int = 100,
        skip_title_paragraph: bool = True,
        max_articles: int | None = None,
    ) -> None:
        if passage_words < 1:
            raise ValueError(f"passage_words must be at least 1, got {passage_words}.")
        if max_articles is not None and max_articles < 1:
            raise ValueError(f"max_articles must be positive or None, got {max_articles}.")
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"KILT knowledge source not found: {self.path}")
        self.passage_words = passage_words
        self.skip_title_paragraph = skip_title_paragraph
        self.max_articles = max_articles
        self.skips = SkipReport(source=str(self.path))
        self.articles_read = 0

    def passages(self) -> Iterator[Passage]:
        self.skips = SkipReport(source=str(self.path))
        self.articles_read = 0
        for line_number, record in iter_jsonl(self.path, self.skips):
            if self.max_articles is not None and self.articles_read >= self.max_articles:
                return
            wikipedia_id = record.get("wikipedia_id", record.get("_id"))
            title = record.get("wikipedia_title", record.get("title"))
            text = record.get("text")
            missing = [name for name, value in (("wikipedia_id", wikipedia_id), ("wikipedia_title", title), ("text", text)) if value is None]
            if missing:
                self.skips.skip("missing fields", line_number, ", ".join(missing))
                continue
            if not isinstance(text, list):
                self.skips.skip("text is not a list of paragraphs", line_number)
                continue
            passages = chunk_article(
                str(wikipedia_id),
                str(title),
                text,
                passage_words=self.passage_words,
                skip_title_paragraph=self.skip_title_paragraph,
            )
            self.articles_read += 1
            if not passages:
                self.skips.skip("article with no text", line_number, f"wikipedia_id={wikipedia_id}")
                continue
            yield from passages

    def documents(self) -> Iterator[Document]:
        for passage in self.passages():
            yield passage_to_document(passage)


def passage_to_document(passage: Passage) -> Document:
    return Document(id=passage.id, content=passage.text, meta=passage.meta())
