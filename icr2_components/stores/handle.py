"""One handle over an index, whichever store holds it: build, open, retrieve (BM25, dense, hybrid), sample.

The same YAML config and the same calls serve the embedded in-memory store on a laptop and Elasticsearch for
a whole KILT dump; only ``store.type`` changes.

Usage:
    >>> from icr2_components.stores import open_index
    >>> index = open_index("indexing/kilt-sample.yaml")        # builds the sample index on first use
    >>> docs = index.retrieve("who got the first nobel prize in physics", method="hybrid", top_k=10)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from icr2_components.kilt.knowledge_source import KiltKnowledgeSource
from icr2_components.kilt.sample import build_sample
from icr2_components.kilt.seen_ids import SeenIds
from icr2_components.records import SkipReport
from icr2_components.paths import cache_dir
from icr2_components.stores.config import IndexConfig, load_index_config
from icr2_components.stores.embedding import PassageEmbedder

RETRIEVAL_METHODS = ("bm25", "dense", "hybrid")


@dataclass
class IndexReport:
    """What an indexing run did: counts, skips and timing."""

    store: str
    index: str
    passages_streamed: int = 0
    documents_in_store: int = 0
    seconds: float = 0.0
    skips: dict = field(default_factory=dict)
    resumed_from: int = 0
    # Elasticsearch only: documents the node rejected (listed in the writer's failures file), and whether the
    # final count matched the stream
    failed: int = 0
    count_ok: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def corpus_path(config: IndexConfig) -> Path:
    if config.corpus.path == "sample":
        return build_sample().corpus
    path = Path(config.corpus.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"corpus.path {path} does not exist (use 'sample' for the bundled sample).")
    return path


def config_fingerprint(config: IndexConfig) -> str:
    """Changes whenever the passages or their embeddings would change."""
    path = corpus_path(config)
    stat = path.stat()
    key = {
        "corpus": str(path.resolve()),
        "size": stat.st_size,
        "passage_words": config.corpus.passage_words,
        "skip_title_paragraph": config.corpus.skip_title_paragraph,
        "max_articles": config.corpus.max_articles,
        "embedding": config.embedding.model if config.embedding.enabled else None,
        "meta_fields_to_embed": config.embedding.meta_fields_to_embed if config.embedding.enabled else None,
    }
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class IndexHandle:
    """Build, open and query one index. Obtain one with :func:`open_index`."""

    def __init__(self, config: IndexConfig) -> None:
        self.config = config.validate()
        self._store = None
        self._lock = threading.RLock()
        self._embedder = (
            PassageEmbedder(
                config.embedding.model,
                batch_size=config.embedding.batch_size,
                meta_fields=config.embedding.meta_fields_to_embed,
                device=config.embedding.device,
            )
            if config.embedding.enabled
            else None
        )
        self._retrievers: dict[str, Any] = {}
        self._dense_matrix = None
        self._has_passages = False

    # -- building -------------------------------------------------------------------------------------------

    @property
    def is_in_memory(self) -> bool:
        return self.config.store.type == "in_memory"

    def persist_path(self) -> Path:
        if self.config.store.persist_path:
            return Path(self.config.store.persist_path).expanduser()
        return cache_dir() / "indexes" / f"{self.config.name}-{config_fingerprint(self.config)}.json"

    def source(self) -> KiltKnowledgeSource:
        """The configured KILT corpus as a passage source (its ``skips`` fill as it is read)."""
        return KiltKnowledgeSource(
            corpus_path(self.config),
            passage_words=self.config.corpus.passage_words,
            skip_title_paragraph=self.config.corpus.skip_title_paragraph,
            max_articles=self.config.corpus.max_articles,
        )

    def documents(self, progress: bool = True) -> tuple[KiltKnowledgeSource, Iterable[Document]]:
        """The corpus as a stream of documents (embedded when embedding is on)."""
        source = self.source()
        stream: Iterable[Document] = source.documents()
        if self._embedder is not None:
            stream = self._embedder.embed_stream(stream)
        return source, stream

    def build(self, progress: bool = True, documents: Iterable[Document] | None = None) -> IndexReport:
        """Index the configured corpus (or the given ``documents``, e.g. a BEIR corpus) into the store.

        Nothing is lost silently: the corpus reader's skips (bad lines, repeated articles) and, for given
        ``documents``, repeated ids (the first one wins) are in ``report.skips``. A corpus that yields no passage
        is an :class:`EmptyCorpusError`, raised before the store is touched; a store that ends up holding another
        number of passages than were streamed is a :class:`DocumentCountMismatchError`.
        """
        from tqdm.auto import tqdm

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
            what = f"corpus {source.path}" if source is not None else "the documents given to build()"
            detail = source.skips.summary() if source is not None else "no document"
            raise EmptyCorpusError(
                f"{what} yielded no passage ({detail}); nothing was indexed into '{self.config.name}'. "
                "Check corpus.path (a KILT knowledge-source JSONL, one article per line) or use path: sample."
            )
        raw = itertools.chain((first,), raw)
        embed = self._embedder.embed_stream if self._embedder is not None else None
        report = IndexReport(store=self.config.store.type, index=self.config.store.index)
        if self.is_in_memory:
            store = self._new_in_memory_store()
            stream = embed(raw) if embed is not None else raw
            batch: list[Document] = []
            for document in tqdm(stream, desc=f"indexing {self.config.name}", unit=" passages", disable=not progress):
                batch.append(document)
                if len(batch) >= self.config.writer.batch_size:
                    store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
                    report.passages_streamed += len(batch)
                    batch = []
            if batch:
                store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
                report.passages_streamed += len(batch)
            stored = int(store.count_documents())
            if stored != report.passages_streamed:
                # ids are unique by construction (repeated ones are skipped above); a mismatch is a bug to report
                from icr2_components.stores.elasticsearch_writer import DocumentCountMismatchError

                raise DocumentCountMismatchError(
                    f"The in-memory store for '{self.config.name}' holds {stored} documents after {report.passages_streamed} "
                    "were streamed; nothing was saved.",
                    report,
                )
            path = self.persist_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            store.save_to_disk(str(tmp))
            os.replace(tmp, path)
            self._store = store
        else:
            from icr2_components.stores.elasticsearch_writer import ElasticsearchStreamingWriter

            writer = ElasticsearchStreamingWriter.from_config(self.config, fingerprint=config_fingerprint(self.config))
            # the writer skips a resumed prefix on the raw stream and only then embeds: a resume after N
            # passages costs reading N passages, not N embeddings
            written = writer.write(raw, progress=progress, prepare=embed)
            report.passages_streamed = written.passages_streamed
            report.resumed_from = written.resumed_from
            report.failed = written.failed
            report.count_ok = written.count_ok
        report.skips = source.skips.as_dict() if source is not None else skips.as_dict()
        report.documents_in_store = self.count()
        report.seconds = time.perf_counter() - start
        return report

    def _new_in_memory_store(self):
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        # BM25Okapi with Elasticsearch's k1/b so both stores rank alike; cosine like the ES dense_vector index.
        return InMemoryDocumentStore(
            bm25_algorithm="BM25Okapi",
            bm25_parameters={"k1": self.config.store.bm25_k1, "b": self.config.store.bm25_b},
            embedding_similarity_function="cosine",
            index=f"{self.config.name}-{config_fingerprint(self.config)}",
        )

    # -- opening --------------------------------------------------------------------------------------------

    @property
    def document_store(self):
        with self._lock:
            if self._store is None:
                self._store = self._open_store()
            return self._store

    def _open_store(self):
        if self.is_in_memory:
            path = self.persist_path()
            if not path.exists():
                self.build(progress=True)
                return self._store
            from haystack.document_stores.in_memory import InMemoryDocumentStore

            # the saved file carries the store's own settings (BM25 parameters, similarity, index name)
            return InMemoryDocumentStore.load_from_disk(str(path))
        from icr2_components.stores.elasticsearch_store import build_elasticsearch_store

        self._require_elasticsearch_index()
        return build_elasticsearch_store(self.config.store, embedding_dim=self._embedder.dimension if self._embedder else None)

    def _require_elasticsearch_index(self) -> None:
        """Refuse to open an index that was never built: Haystack's store would create it empty, and every
        search would answer nothing with no word."""
        from icr2_components.stores.elasticsearch_store import build_elasticsearch_client, call_with_retries, describe_hosts

        store = self.config.store
        url = describe_hosts(store.hosts)
        client = build_elasticsearch_client(store.hosts, request_timeout=store.request_timeout, max_retries=0)
        try:
            exists = call_with_retries(lambda: bool(client.indices.exists(index=store.index)), url=url,
                                       max_retries=store.max_retries, initial_backoff=0.5, max_backoff=5.0)
        finally:
            client.close()
        if not exists:
            raise IndexNotBuiltError(
                f"Elasticsearch at {url} has no index '{store.index}' (store.index of '{self.config.name}'): build it first "
                "with `icr2 index --config <this config>`."
            )

    def count(self) -> int:
        return int(self.document_store.count_documents())

    # -- retrieval ------------------------------------------------------------------------------------------

    def _retriever(self, method: str):
        if method in self._retrievers:
            return self._retrievers[method]
        store = self.document_store
        if self.is_in_memory:
            from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever

            retriever = InMemoryBM25Retriever(store) if method == "bm25" else InMemoryEmbeddingRetriever(store)
        else:
            from haystack_integrations.components.retrievers.elasticsearch import (
                ElasticsearchBM25Retriever,
                ElasticsearchEmbeddingRetriever,
            )

            # fuzziness off: plain BM25, as the in-memory store ranks it (the integration's default "AUTO" also
            # matches misspellings, which re-ranks most lists: top-10 overlap between stores fell to 0.39)
            retriever = (
                ElasticsearchBM25Retriever(document_store=store, fuzziness="0")
                if method == "bm25"
                else ElasticsearchEmbeddingRetriever(document_store=store)
            )
        self._retrievers[method] = retriever
        return retriever

    def retrieve(self, query: str, method: str = "bm25", top_k: int = 10, filters: dict | None = None) -> list[Document]:
        """Ranked passages for ``query``; ``method`` is bm25, dense or hybrid (reciprocal-rank fusion)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("The query must be a non-empty string.")
        if method not in RETRIEVAL_METHODS:
            raise ValueError(f"Unknown retrieval method {method!r}; choose one of {RETRIEVAL_METHODS}.")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        if method in ("dense", "hybrid") and self._embedder is None:
            raise ValueError(f"Index '{self.config.name}' was built without embeddings; set embedding.enabled: true and re-index for {method} retrieval.")
        self._require_passages()
        if method == "bm25":
            return self._bm25(query, top_k, filters)
        if method == "dense":
            return self._dense(query, top_k, filters)
        # Fuse deeper lists than asked for, so that documents ranked just below top_k in one list can rise.
        depth = max(top_k * 2, 20)
        return reciprocal_rank_fusion([self._bm25(query, depth, filters), self._dense(query, depth, filters)], top_k=top_k)

    def _require_passages(self) -> None:
        """An empty index is an error at the first query (then remembered), not an empty answer or a numpy error."""
        if self._has_passages:
            return
        if self.count() == 0:
            raise EmptyIndexError(
                f"Index '{self.config.name}' ({self.config.store.type}, '{self.config.store.index}') holds no passages: "
                "its corpus was empty or the load failed. Re-index with `icr2 index --config <this config>`."
            )
        self._has_passages = True

    def _bm25(self, query: str, top_k: int, filters: dict | None) -> list[Document]:
        try:
            return self._retriever("bm25").run(query=query, top_k=top_k, filters=filters)["documents"]
        except Exception as error:  # noqa: BLE001 - only the clause limit is translated, the rest re-raised
            limit = _clause_limit(error)
            if limit is None:
                raise
            raise QueryTooLongError(
                f"The query ({len(query)} characters, {len(query.split())} words) is too long for Elasticsearch's BM25: "
                f"it expands to more than the node's {limit} query clauses (indices.query.bool.max_clause_count). "
                "Shorten the query (a question, not a document).",
                limit=limit,
            ) from error

    def _dense(self, query: str, top_k: int, filters: dict | None) -> list[Document]:
        embedding = self._embedder.embed_query(query)
        if self.is_in_memory and filters is None:
            return self._in_memory_dense(embedding, top_k)
        return self._retriever("dense").run(query_embedding=embedding, top_k=top_k, filters=filters)["documents"]

    def _in_memory_dense(self, embedding: list[float], top_k: int) -> list[Document]:
        """Exact cosine search over a matrix built once.

        Haystack's in-memory embedding retrieval rebuilds an array from every document's embedding list on
        each query (about 2 s a query for 4K passages on 2 cores); the matrix makes it a single matmul with
        the same ranking (cosine; ties broken by id as a stable order).
        """
        import numpy as np

        with self._lock:
            if self._dense_matrix is None:
                store = self.document_store
                documents = [d for d in store.storage.values() if d.embedding is not None]
                if not documents:
                    raise EmptyIndexError(
                        f"Index '{self.config.name}' holds {len(store.storage)} passages but none has an embedding, so dense "
                        "retrieval has nothing to search: re-index with embedding.enabled: true, or use method bm25."
                    )
                matrix = np.asarray([d.embedding for d in documents], dtype=np.float32)
                matrix /= np.linalg.norm(matrix, axis=1, keepdims=True).clip(min=1e-12)
                self._dense_matrix = (matrix, documents)
        matrix, documents = self._dense_matrix
        query = np.asarray(embedding, dtype=np.float32)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        scores = matrix @ query
        k = min(top_k, len(documents))
        top = np.argpartition(-scores, k - 1)[:k]
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), documents[i].id))
        return [replace(documents[i], score=float(scores[i])) for i in order]

    def random_documents(self, n: int, seed: int = 0, exclude_ids: Iterable[str] = ()) -> list[Document]:
        """``n`` passages sampled uniformly with ``seed``, none of them in ``exclude_ids`` (LOFT-style filling)."""
        if n < 0:
            raise ValueError("n must be >= 0.")
        excluded = set(exclude_ids)
        store = self.document_store
        if self.is_in_memory:
            ids = sorted(set(store.storage) - excluded)
            chosen = random.Random(seed).sample(ids, min(n, len(ids)))
            return [store.storage[i] for i in chosen]
        # Elasticsearch: a seeded random_score query, over-fetching to make up for excluded hits
        response = store.client.search(
            index=self.config.store.index,
            size=n + len(excluded),
            query={"function_score": {"query": {"match_all": {}}, "random_score": {"seed": seed, "field": "_seq_no"}}},
            source=False,
        )
        ids = [hit["_id"] for hit in response["hits"]["hits"] if hit["_id"] not in excluded][:n]
        if not ids:
            return []
        found = {d.id: d for d in store.filter_documents({"field": "id", "operator": "in", "value": ids})}
        return [found[i] for i in ids if i in found]


class EmptyCorpusError(ValueError):
    """The corpus (or the documents given to ``build``) yielded no passage; nothing was indexed."""


class IndexNotBuiltError(ValueError):
    """The configured Elasticsearch index does not exist; it is built with ``icr2 index``."""


class EmptyIndexError(ValueError):
    """The index exists but holds no passages."""


class QueryTooLongError(ValueError):
    """The query expands to more clauses than Elasticsearch allows; the message names the limit."""

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit


_CLAUSE_LIMIT = re.compile(r"maxClauseCount is set to (\d+)|max_clause_count.*?(\d+)|too_many_(?:nested_)?clauses", re.IGNORECASE)


def _clause_limit(error: BaseException) -> int | None:
    """Elasticsearch's clause limit when ``error`` is its too-many-clauses refusal (found in the error text)."""
    text = str(error)
    info = getattr(error, "info", None) or getattr(error, "body", None)
    if info:
        text += " " + json.dumps(info, default=str)
    match = _CLAUSE_LIMIT.search(text)
    if match is None:
        return None
    number = match.group(1) or match.group(2)
    return int(number) if number else 0


def _first_id_wins(documents: Iterable[Document], skips: SkipReport) -> Iterator[Document]:
    """Given documents with a repeated id: the first is kept, each repeat counted (a store would overwrite)."""
    seen = SeenIds()
    for position, document in enumerate(documents, start=1):
        if not seen.add(document.id):
            skips.skip("duplicate document id (first kept)", position, document.id)
            continue
        yield document


def reciprocal_rank_fusion(ranked_lists: list[list[Document]], top_k: int, k: int = 60) -> list[Document]:
    """Fuse ranked lists by reciprocal rank (Cormack et al., k=60); ties broken by id for determinism."""
    scores: dict[str, float] = {}
    documents: dict[str, Document] = {}
    for ranked in ranked_lists:
        for rank, document in enumerate(ranked, start=1):
            scores[document.id] = scores.get(document.id, 0.0) + 1.0 / (k + rank)
            documents.setdefault(document.id, document)
    order = sorted(scores, key=lambda doc_id: (-scores[doc_id], doc_id))[:top_k]
    fused = []
    for doc_id in order:
        document = documents[doc_id]
        fused.append(Document(id=document.id, content=document.content, meta=dict(document.meta), score=scores[doc_id], embedding=document.embedding))
    return fused


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
    key = json.dumps(config.to_dict(), sort_keys=True)
    with _HANDLES_LOCK:
        if key not in _HANDLES:
            _HANDLES[key] = IndexHandle(config)
        return _HANDLES[key]
