"""``corpus.format: kilt`` (the default): the KILT knowledge source, one JSON article per line, ``text`` a list of
paragraphs (:class:`~icr2_components.kilt.knowledge_source.KiltKnowledgeSource`).

Chunking is a setting: with ``chunking`` null (the default) an article is cut by KILT/DPR's rule, ``passage_words``
words a passage counted across paragraphs, each passage keeping its paragraph and character offsets (KILT
provenance maps onto them); with ``chunking`` set, the article's paragraphs (joined by blank lines) go through
Haystack's ``DocumentSplitter`` (``split_by: passage, split_length: 1`` keeps each paragraph a passage), and the
passages keep ``wikipedia_id``, ``title`` and ``passage_index`` but no character offsets.

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: kilt
  path: kilt_knowledgesource.json   # or: sample (the bundled sample)
  passage_words: 100                # DPR's rule (the default), or:
  # chunking: {split_by: passage, split_length: 1}   # one passage a paragraph
```
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.corpora.chunking import Chunker
from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.settings import ConfigError, CorpusConfig
from icr2_components.kilt.knowledge_source import KiltKnowledgeSource


@dataclass
class KiltCorpusSettings(CorpusConfig):
    format: str = "kilt"

    def validate(self) -> None:
        super().validate()
        if self.chunking is not None and self.passage_words != 100:
            raise ConfigError(
                "corpus.passage_words is KILT/DPR's rule and corpus.chunking replaces it: give one of them."
            )

    def validate_path(self) -> None:
        # a folder fails at once; a missing file is reported when the corpus is opened (it may be made meanwhile)
        if self.path != "sample" and self.resolved_path().is_dir():
            raise ConfigError(
                f"corpus.path {self.path} is a directory; give the KILT knowledge-source file (JSON lines) in it, "
                "or set corpus.format: folder to index the documents in a folder."
            )

    def resolved_path(self) -> Path:
        if self.path == "sample":
            from icr2_components.kilt.sample import build_sample

            return build_sample().corpus
        return super().resolved_path()


@register_corpus_reader("kilt")
class KiltCorpusReader(CorpusReader):
    """The KILT knowledge source as passages (the skips are the source's: bad lines, repeated articles)."""

    settings_class = KiltCorpusSettings
    settings: KiltCorpusSettings

    def source_path(self) -> Path:
        # the bundled sample is written when it is first asked for
        return self.settings.resolved_path()

    def source(self) -> KiltKnowledgeSource:
        settings = self.settings
        return KiltKnowledgeSource(
            self.path(),
            passage_words=settings.passage_words,
            skip_title_paragraph=settings.skip_title_paragraph,
            max_articles=settings.max_articles,
        )

    def documents(self) -> Iterator[Document]:
        source = self.source()
        self.skips = source.skips
        passages = source.documents() if self.settings.chunking is None else self._chunked(source)
        for document in passages:
            # the source's report is replaced at the start of each read: follow it
            self.skips = source.skips
            self.records_read = source.articles_read
            yield document
        self.skips = source.skips
        self.records_read = source.articles_read

    def passages(self):
        """The KILT passages with their provenance (DPR's rule; ``chunking`` must be null)."""
        if self.settings.chunking is not None:
            raise ConfigError(
                "passages() gives DPR-rule passages with provenance; with corpus.chunking use documents()."
            )
        source = self.source()
        for passage in source.passages():
            self.skips = source.skips
            yield passage
        self.skips = source.skips

    def _chunked(self, source: KiltKnowledgeSource) -> Iterator[Document]:
        chunker = Chunker(self.settings.chunking)
        for article in source.articles():
            body = article.body(self.settings.skip_title_paragraph)
            passages = []
            if body:
                parent = Document(content="\n\n".join(body), meta={"wikipedia_id": article.wikipedia_id,
                                                                  "title": article.title})
                passages = chunker.split(parent, article.wikipedia_id)
            if not passages:
                source.skips.skip("article with no text", article.line_number, f"wikipedia_id={article.wikipedia_id}")
                continue
            yield from passages

    def fingerprint_key(self) -> dict[str, Any]:
        """As the index config's fingerprint always read a KILT corpus (so indexes built before formats existed
        keep theirs), with the chunking added only when it is set."""
        path = self.path()
        key: dict[str, Any] = {
            "corpus": str(path.resolve()),
            "size": path.stat().st_size,
            "passage_words": self.settings.passage_words,
            "skip_title_paragraph": self.settings.skip_title_paragraph,
            "max_articles": self.settings.max_articles,
        }
        if self.settings.chunking is not None:
            key["chunking"] = self.settings.chunking.as_key()
        return key
