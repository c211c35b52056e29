"""One handle over an index, whichever store holds it: build, open, retrieve (BM25, dense, hybrid), sample.

The same YAML config and the same calls serve the embedded in-memory store on a laptop and Elasticsearch for
a whole KILT dump; only ``store.type`` changes. What differs between stores is a
:class:`~icr2_components.stores.backend.StoreBackend` (one registered class per store type); what they share
(reading and embedding the corpus, refusing empty corpora and indexes, the retrieval methods) is here.

Usage:
    >>> from icr2_components.stores import open_index
    >>> index = open_index("indexing/kilt-sample.yaml")        # builds the sample index on first use
    >>> docs = index.retrieve("who got the first nobel prize in physics", method="hybrid", top_k=10)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

from icr2_components.corpora import CorpusReader, corpus_reader
from icr2_components.kilt.seen_ids import SeenIds
from icr2_components.models.token_counting import PassageTokenCounter, with_token_counts
from icr2_components.records import SkipReport
from icr2_components.stores.backend import StoreBackend, store_backend
from icr2_components.stores.config import IndexConfig, config_fingerprint, load_index_config
from icr2_components.stores.embedding_shards import passage_embedder
from icr2_components.stores.errors import (
    EmptyCorpusError,
    EmptyIndexError,
    ExistingIndexError,
    IndexNotBuiltError,
)
from icr2_components.stores.retrieval_methods import UnknownRetrievalMethodError, retrieval_method
from icr2_components.text.blank import is_blank


@dataclass
class IndexReport:
    """What an indexing run did, whichever store: counts, skips and timing.

    ``resumed_from``, ``rejected`` and ``count_ok`` mean the same for every store (a store that always starts
    over reports 0 resumed, one that takes every document 0 rejected); ``details`` holds what only this store
    type reports: Elasticsearch its URL, documents written this run, the count check's numbers, the checkpoint
    and failures files; the in-memory store the file it saved.
    """

    store: str
    index: str
    passages_streamed: int = 0
    documents_in_store: int = 0
    # passages a previous run had confirmed (a checkpoint), skipped this run
    resumed_from: int = 0
    # documents the store refused (the details say where each is listed)
    rejected: int = 0
    # the store holds passages_streamed - rejected documents (None: not checked)
    count_ok: bool | None = None
    seconds: float = 0.0
    skips: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def token_counters(config: IndexConfig) -> list[PassageTokenCounter]:
    """A counter per tokenizer of ``corpus.count_tokens_for`` (cache-less: indexing sees each passage once)."""
    from icr2_components.models.cache import MODEL_CACHE

    return [
        PassageTokenCounter(MODEL_CACHE.tokenizer(name), max_cache_entries=0) for name in config.corpus.count_tokens_for
    ]


def store_fingerprint(config: IndexConfig, counters: Sequence[PassageTokenCounter] | None = None) -> str:
    """What a stored index holds: :func:`config_fingerprint` (passages, embeddings) and, when tokens are counted
    at indexing, the fingerprint of each tokenizer (its definition, not its name), so that a saved index whose
    stored counts came from another tokenizer is never reused (the in-memory store is rebuilt; an Elasticsearch
    load refuses to resume another stream's checkpoint)."""
    base = config_fingerprint(config)
    if not config.corpus.count_tokens_for:
        return base  # indexes without stored counts keep their fingerprint
    counters = token_counters(config) if counters is None else counters
    key = {"passages": base, "token_counts": [c.fingerprint for c in counters]}
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class IndexHandle:
    """Build, open and query one index. Obtain one with :func:`open_index`.

    ``backend`` is the :class:`~icr2_components.stores.backend.StoreBackend` registered for ``store.type``.
    """

    def __init__(self, config: IndexConfig) -> None:
        self.config = config.validate()
        self._store = None
        self._lock = threading.RLock()
        # a PassageEmbedder, or one reading the vectors of `icr2 embed` shards when embedding.vectors_dir is set
        self._embedder = passage_embedder(config.embedding) if config.embedding.enabled else None
        backend_class = store_backend(config.store.type)
        self.backend: StoreBackend = backend_class(config, functools.cache(self._store_fingerprint), self._embedder)
        self._has_passages = False
        self._counters: list[PassageTokenCounter] | None = None

    def token_counters(self) -> list[PassageTokenCounter]:
        """The counters of ``corpus.count_tokens_for`` (tokenizers loaded on first use)."""
        if self._counters is None:
            self._counters = token_counters(self.config)
        return self._counters

    def _store_fingerprint(self) -> str:
        return store_fingerprint(self.config, self.token_counters() if self.config.corpus.count_tokens_for else None)

    def _prepare(self) -> Callable[[Iterable[Document]], Iterable[Document]] | None:
        """What is done to each passage before it is stored: its token counts, then its embedding."""
        counters = self.token_counters()
        embed = self._embedder.embed_stream if self._embedder is not None else None
        if not counters:
            return embed
        if embed is None:
            return lambda stream: with_token_counts(stream, counters)
        return lambda stream: embed(with_token_counts(stream, counters))

    # -- building -------------------------------------------------------------------------------------------

    def source(self) -> CorpusReader:
        """The configured corpus's reader (``corpus.format``; its ``skips`` fill as it is read)."""
        return corpus_reader(self.config.corpus)

    def documents(self, progress: bool = True) -> tuple[CorpusReader, Iterable[Document]]:
        """The corpus as a stream of documents (embedded when embedding is on)."""
        source = self.source()
        stream: Iterable[Document] = source.documents()
        if self._embedder is not None:
            stream = self._embedder.embed_stream(stream)
        return source, stream

    def build(self, progress: bool = True, documents: Iterable[Document] | None = None) -> IndexReport:
        """Index the configured corpus (or the given ``documents``, e.g. a BEIR corpus) into the store.

        Nothing is lost silently: the corpus reader's skips (bad lines, rows or files, repeated ids) and, for given
        ``documents``, documents with no text and repeated ids (the first one wins) are in ``report.skips``. A
        corpus that yields no passage is an :class:`EmptyCorpusError`, raised before the store is touched; a store
        that ends up holding another number of passages than were streamed is a
        :class:`~icr2_components.stores.errors.DocumentCountMismatchError`.
        With ``corpus.format: existing`` nothing is written: the store is opened and checked
        (:meth:`check_existing`).
        """
        if documents is None and not self.config.corpus.reads_documents:
            return self.check_existing()
        start = time.perf_counter()
        skips = SkipReport(source="documents")
        if documents is None:
            source = self.source()
            raw: Iterator[Document] = source.documents()
        else:
            source = None
            raw = _first_id_wins(documents, skips)
        first = next(raw, None)
        if first is None:
            what = source.describe() if source is not None else "the documents given to build()"
            detail = source.skips.summary() if source is not None else "no document"
            raise EmptyCorpusError(
                f"{what} yielded no passage ({detail}); nothing was indexed into '{self.config.name}'. "
                "Check corpus.path and corpus.format (kilt: a KILT knowledge-source JSONL, one article per line; "
                "jsonl, csv, parquet, hf_dataset: corpus.fields names the text field; folder: corpus.include) or "
                "use path: sample."
            )
        raw = itertools.chain((first,), raw)
        with self._lock:
            written = self.backend.write(raw, prepare=self._prepare(), progress=progress)
            if written.document_store is not None:
                self._store = written.document_store
            self._has_passages = False
        return IndexReport(
            store=self.config.store.type,
            index=self.backend.index_name,
            passages_streamed=written.passages_streamed,
            documents_in_store=self.count(),
            resumed_from=written.resumed_from,
            rejected=written.rejected,
            count_ok=written.count_ok,
            seconds=time.perf_counter() - start,
            skips=source.skips.as_dict() if source is not None else skips.as_dict(),
            details=written.details,
        )

    def check_existing(self, sample: int = 20) -> IndexReport:
        """An index used as it is (``corpus.format: existing``): open it, count it, and check ``sample`` of its
        documents have text and, with embeddings on, a vector of the model's dimension. Writes nothing.

        :raises EmptyIndexError: the store holds no document.
        :raises ExistingIndexError: a sampled document has no text, or no vector (or one of another dimension)
            while the config turns embeddings on.
        """
        start = time.perf_counter()
        store = self.document_store
        total = int(store.count_documents())
        if total == 0:
            raise EmptyIndexError(f"{self.backend.describe()} (corpus.format: existing) holds no documents.")
        documents = self.backend.random_documents(store, min(sample, total), 0, set())
        no_text = [d.id for d in documents if not isinstance(d.content, str) or not d.content.strip()]
        if no_text:
            raise ExistingIndexError(
                f"{self.backend.describe()}: documents {no_text[:5]} have no text in 'content', which BM25 searches "
                "and readers read; an index used as it is needs Haystack's layout (content, optional title, embedding)."
            )
        dimension = None
        if self._embedder is not None:
            dimension = self._embedder.dimension
            bad = [d.id for d in documents if d.embedding is None or len(d.embedding) != dimension]
            if bad:
                raise ExistingIndexError(
                    f"{self.backend.describe()}: documents {bad[:5]} have no embedding of dimension {dimension} "
                    f"({self.config.embedding.model}); dense and hybrid retrieval need one per document from that "
                    "model. Set embedding.enabled: false to search it by BM25 only, or embedding.model to the model "
                    "that made its vectors."
                )
        with_title = sum(1 for d in documents if d.meta.get("title"))
        return IndexReport(
            store=self.config.store.type,
            index=self.backend.index_name,
            documents_in_store=total,
            count_ok=None,
            seconds=time.perf_counter() - start,
            skips=SkipReport(source=self.backend.describe()).as_dict(),
            details={
                "used_as_is": True,
                "sampled": len(documents),
                "sampled_with_title": with_title,
                "embedding_dimension": dimension,
            },
        )

    # -- opening --------------------------------------------------------------------------------------------

    @property
    def document_store(self):
        """The Haystack document store holding the index (built first when the store builds on first use)."""
        with self._lock:
            if self._store is None:
                builds = self.backend.builds_on_first_use and self.config.corpus.reads_documents
                if builds and not self.backend.index_exists():
                    self.build(progress=True)
                else:
                    self._store = self.backend.open_document_store()
            return self._store

    def count(self) -> int:
        return int(self.document_store.count_documents())

    # -- retrieval ------------------------------------------------------------------------------------------

    def retrieve(
        self, query: str, method: str = "bm25", top_k: int = 10, filters: dict | None = None
    ) -> list[Document]:
        """Ranked passages for ``query``; ``method`` is a registered retrieval method: bm25, dense or hybrid
        (reciprocal-rank fusion of the two)."""
        if not isinstance(query, str) or is_blank(query):  # characters that print nothing are no query
            raise ValueError(f"The query must be a non-empty string, got {query!r:.60}.")
        try:
            retrieval = retrieval_method(method)
        except UnknownRetrievalMethodError as error:
            raise ValueError(str(error)) from None
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        if not self.backend.builds_on_first_use and self._store is None and not self.backend.index_exists():
            # before any other message: an index never built is not one "built without embeddings"
            raise IndexNotBuiltError(
                f"{self.backend.describe()} does not exist: build it first with "
                f"`icr2 index --config <the config of '{self.config.name}'>`."
            )
        if retrieval.needs_embeddings and self._embedder is None:
            raise ValueError(
                f"Index config '{self.config.name}' turns embeddings off (embedding.enabled: false), so "
                f"{method} retrieval has no vectors to search: use method bm25, or set embedding.enabled: "
                "true and re-index with `icr2 index`."
            )
        self._require_passages()
        return retrieval.retrieve(self, query, top_k, filters)

    def search_bm25(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]:
        """The store's BM25 ranking (no checks: :meth:`retrieve` is the entry point; retrieval methods use this)."""
        return self.backend.bm25_documents(self.document_store, query, top_k, filters)

    def embeds_queries_like(self, model: str) -> bool:
        """Whether this index embeds a query exactly as ``model`` does through sentence-transformers (fp32,
        normalised): then a caller's embedding of the query can go to :meth:`search_dense` instead of a second one."""
        embedding = self.config.embedding
        return embedding.enabled and embedding.model == model and embedding.backend == "fp32"

    def search_dense(
        self, query: str, top_k: int, filters: dict | None = None, embedding: Sequence[float] | None = None
    ) -> list[Document]:
        """The store's ranking by similarity to the query's embedding (no checks, as :meth:`search_bm25`);
        ``embedding``: the query's embedding when the caller already has it from this index's model."""
        embedding = self._embedder.embed_query(query) if embedding is None else [float(x) for x in embedding]
        return self.backend.dense_documents(self.document_store, embedding, top_k, filters)

    def _require_passages(self) -> None:
        """An empty index is an error at the first query (then remembered), not an empty answer or a numpy error."""
        if self._has_passages:
            return
        if self.count() == 0:
            raise EmptyIndexError(
                f"Index '{self.config.name}' ({self.backend.describe()}) holds no passages: "
                "its corpus was empty or the load failed. Re-index with `icr2 index --config <this config>`."
            )
        self._has_passages = True

    def random_documents(self, n: int, seed: int = 0, exclude_ids: Iterable[str] = ()) -> list[Document]:
        """``n`` passages sampled uniformly with ``seed``, none of them in ``exclude_ids`` (LOFT-style filling)."""
        if n < 0:
            raise ValueError("n must be >= 0.")
        return self.backend.random_documents(self.document_store, n, seed, set(exclude_ids))


def _first_id_wins(documents: Iterable[Document], skips: SkipReport) -> Iterator[Document]:
    """Given documents: one with no text (blank, or characters that print nothing, as a zero-width space) is
    skipped as ``empty text``; of a repeated id the first is kept, each repeat counted (a store would overwrite)."""
    seen = SeenIds()
    for position, document in enumerate(documents, start=1):
        if not isinstance(document.content, str) or is_blank(document.content):
            skips.skip("empty text", position, document.id)
            continue
        if not seen.add(document.id):
            skips.skip("duplicate document id (first kept)", position, document.id)
            continue
        yield document


_HANDLES: dict[str, IndexHandle] = {}
_HANDLES_LOCK = threading.Lock()


def open_index(config: str | os.PathLike | IndexConfig, overrides: dict[str, Any] | None = None) -> IndexHandle:
    """Open (building on first use, for the in-memory store) the index described by a YAML path or config.

    Handles are cached per process, so components naming the same config share one store and one embedder.
    """
    if not isinstance(config, IndexConfig):
        config = load_index_config(config, overrides=overrides)
    elif overrides:
        raise ValueError("overrides apply to a config path, not to an IndexConfig object.")
    key = json.dumps(dataclasses.asdict(config), sort_keys=True)
    with _HANDLES_LOCK:
        if key not in _HANDLES:
            _HANDLES[key] = IndexHandle(config)
        return _HANDLES[key]
