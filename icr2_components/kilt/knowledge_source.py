"""Streaming reader of the KILT knowledge source (one JSON article per line) into passages.

Memory stays flat however large the file: one article is held at a time (and the ids already read, in a
bitmap). Bad input is counted in a :class:`SkipReport` with its line number and the rest goes on: a line that
is not UTF-8 (each line is decoded on its own), malformed JSON, missing or wrongly typed fields, articles with
no text, and a repeated ``wikipedia_id`` (the first record wins). A file that cannot be read at all (named
``.gz`` but not gzip, a gzip stream cut short) is a :class:`CorpusReadError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from haystack import Document

from icr2_components.kilt.chunking import Passage, chunk_article
from icr2_components.kilt.seen_ids import SeenIds
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.text.blank import is_blank


@dataclass(frozen=True)
class KiltArticle:
    """One valid article of the knowledge source: its line, id, title and paragraphs (``text``)."""

    line_number: int
    wikipedia_id: str
    title: str
    paragraphs: list

    def body(self, skip_title_paragraph: bool = True) -> list[str]:
        """The paragraphs that hold text (paragraph 0 left out when it merely repeats the title)."""
        kept = []
        for index, paragraph in enumerate(self.paragraphs):
            if not isinstance(paragraph, str) or is_blank(paragraph):
                continue
            if index == 0 and skip_title_paragraph and paragraph.strip() == self.title.strip():
                continue
            kept.append(paragraph.strip())
        return kept


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
        if isinstance(passage_words, bool) or not isinstance(passage_words, int) or passage_words < 1:
            raise ValueError(f"passage_words must be an integer >= 1, got {passage_words!r}.")
        if max_articles is not None and (
            isinstance(max_articles, bool) or not isinstance(max_articles, int) or max_articles < 1
        ):
            raise ValueError(f"max_articles must be positive or None, got {max_articles}.")
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"KILT knowledge source not found: {self.path}")
        self.passage_words = passage_words
        self.skip_title_paragraph = skip_title_paragraph
        self.max_articles = max_articles
        self.skips = SkipReport(source=str(self.path))
        self.articles_read = 0

    def articles(self) -> Iterator[KiltArticle]:
        """The valid articles, in file order, before chunking (a chunker of another rule reads these).

        Counted in :attr:`skips` and left out: lines that are not UTF-8 or not JSON objects, records missing
        ``wikipedia_id``/``wikipedia_title``/``text`` or with values of the wrong type, and **repeated articles**:
        the first record of a ``wikipedia_id`` wins and every later one is skipped whole. Paragraphs that are not
        strings are counted one by one (the article's other paragraphs are kept). ``max_articles`` counts the
        articles yielded here.
        """
        self.skips = SkipReport(source=str(self.path))
        self.articles_read = 0
        seen = SeenIds()
        for line_number, record in iter_jsonl(self.path, self.skips):
            if self.max_articles is not None and self.articles_read >= self.max_articles:
                return
            wikipedia_id = record.get("wikipedia_id", record.get("_id"))
            title = record.get("wikipedia_title", record.get("title"))
            text = record.get("text")
            missing = [
                name
                for name, value in (("wikipedia_id", wikipedia_id), ("wikipedia_title", title), ("text", text))
                if value is None
            ]
            if missing:
                self.skips.skip("missing fields", line_number, ", ".join(missing))
                continue
            if (
                isinstance(wikipedia_id, bool)
                or not isinstance(wikipedia_id, (str, int))
                or not str(wikipedia_id).strip()
            ):
                self.skips.skip("wikipedia_id is not a string or an integer", line_number, repr(wikipedia_id)[:60])
                continue
            if not isinstance(title, str):
                self.skips.skip(
                    "wikipedia_title is not a string",
                    line_number,
                    f"wikipedia_id={wikipedia_id}, title={title!r}"[:100],
                )
                continue
            if not isinstance(text, list):
                self.skips.skip("text is not a list of paragraphs", line_number)
                continue
            wikipedia_id = str(wikipedia_id).strip()
            if not seen.add(wikipedia_id):
                self.skips.skip(
                    "duplicate wikipedia_id (first record kept)", line_number, f"wikipedia_id={wikipedia_id}"
                )
                continue
            not_text = sum(1 for paragraph in text if not isinstance(paragraph, str))
            if not_text:
                # counted per paragraph: the article's other paragraphs are still indexed
                for _ in range(not_text):
                    self.skips.skip("paragraph is not a string", line_number, f"wikipedia_id={wikipedia_id}")
            self.articles_read += 1
            yield KiltArticle(line_number, wikipedia_id, title, text)

    def passages(self) -> Iterator[Passage]:
        """The passages of every valid article (:meth:`articles`), in file order, by KILT/DPR's rule.

        Passage ids are ``<wikipedia_id>-w<N>-<n>``, so a second record with the same id would overwrite the first
        one's passages and leave a mixed article: that is why repeated articles are skipped whole. An article that
        yields no passage is counted as ``article with no text``.
        """
        for article in self.articles():
            passages = chunk_article(
                article.wikipedia_id,
                article.title,
                article.paragraphs,
                passage_words=self.passage_words,
                skip_title_paragraph=self.skip_title_paragraph,
            )
            if not passages:
                self.skips.skip("article with no text", article.line_number, f"wikipedia_id={article.wikipedia_id}")
                continue
            yield from passages

    def documents(self) -> Iterator[Document]:
        for passage in self.passages():
            yield passage_to_document(passage)


def passage_to_document(passage: Passage) -> Document:
    return Document(id=passage.id, content=passage.text, meta=passage.meta())
