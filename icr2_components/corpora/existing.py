"""``corpus.format: existing``: an index the user already filled, used as it is; nothing is read or written.

The index config points at it (``store.index`` of an Elasticsearch index, ``store.persist_path`` of a Haystack
``InMemoryDocumentStore`` saved with ``save_to_disk``), so that ``IndexRetriever``, ``icr2 search`` and ``icr2
compare`` read it like an index ``icr2 index`` built. ``icr2 index`` on such a config builds nothing: it opens the
store, counts its documents and checks a sample of them (each has text in ``content``; with embeddings on, each
has an ``embedding`` of the model's dimension), and reports what it found.

What the store must hold, the layout Haystack's own document stores write:

- ``content``: the passage text (BM25 searches it);
- ``title`` (optional, a metadata field): BM25 also searches it, and ``meta_fields_to_embed`` embeds it;
- ``embedding`` (for dense and hybrid retrieval): a vector from ``embedding.model`` (cosine similarity), or
  ``embedding.enabled: false`` for BM25 only;
- any other metadata as top-level fields (Elasticsearch) or ``meta`` (in-memory), for filters.

Usage (``indexing/*.yaml``):

```yaml
name: my-es-index
store: {type: elasticsearch, hosts: http://127.0.0.1:9200, index: the-index-you-filled}
corpus: {format: existing, path: the-index-you-filled, count_tokens_for: []}
embedding: {enabled: true, model: all-minilm-l6-v2}
```
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.settings import ConfigError, CorpusConfig
from icr2_components.strict_mapping import PathText


@dataclass
class ExistingCorpusSettings(CorpusConfig):
    format: str = "existing"
    # what the index is, for messages (the store section says where it is)
    path: PathText = "existing"

    reads_documents: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        if self.chunking is not None or self.max_articles is not None:
            raise ConfigError(
                "corpus.format: existing reads nothing, so corpus.chunking and corpus.max_articles have no meaning: "
                "leave them out."
            )
        if self.count_tokens_for:
            raise ConfigError(
                "corpus.format: existing writes nothing, so no token counts are stored: set corpus.count_tokens_for: "
                "[] (the token-budget corpus builder then counts tokens at run time)."
            )


@register_corpus_reader("existing")
class ExistingCorpusReader(CorpusReader):
    """Reads no document: the store already holds them (:class:`ExistingCorpusSettings`)."""

    settings_class = ExistingCorpusSettings

    def documents(self) -> Iterator[Document]:
        raise ConfigError(
            "corpus.format: existing uses an index as it is: there are no documents to read or write. Use the "
            "index (IndexRetriever, icr2 search, icr2 compare); `icr2 index` only checks it."
        )

    def describe(self) -> str:
        return f"existing index {self.settings.path}"

    def fingerprint_key(self) -> dict[str, Any]:
        return {"format": self.format, "path": self.settings.path}
