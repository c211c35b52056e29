"""``store.type: in_memory``: Haystack's embedded ``InMemoryDocumentStore``, saved to one JSON file.

Built on first use (a laptop needs no server and no separate indexing step), ranked like the Elasticsearch
store: BM25 with the same analyzer, fields, formula and ``k1``/``b``
(:class:`~icr2_components.stores.in_memory_bm25.FieldedBM25`, built from the saved passages when the store is
opened), cosine similarity for dense retrieval.

**Where it stops** (``bench/scale.py``, docs/benchmarks/indexing-and-scale.md "Scale bench"): with 384-d vectors the
process holds
about 28 KB of RAM per passage (3.3 GiB at 100K passages, 0.9 GiB at 10K), the saved JSON about 9 KB per
passage, and dense search scans an exact matrix (p50 7.4 ms at 100K, growing linearly). An 8 GiB process
holds about 280K passages; the store logs a warning past :data:`LARGE_STORE_PASSAGES`. Beyond that, use
Elasticsearch (``indexing/kilt-sample-elasticsearch.yaml``, ``indexing/kilt-full-elasticsearch.yaml``).

Usage:
    >>> from icr2_components.stores import open_index
    >>> index = open_index("indexing/kilt-sample.yaml")   # store: {type: in_memory}
    >>> index.backend.describe()
    'in_memory store saved at ~/.cache/icr2_components/indexes/kilt-sample-<fingerprint>.json'
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from icr2_components.paths import cache_dir, output_file_problem
from icr2_components.stores.backend import StoreBackend, StoreSettings, StoreWrite, register_store_backend
from icr2_components.stores.config import ConfigError
from icr2_components.stores.errors import (
    DocumentCountMismatchError,
    EmptyIndexError,
    IndexConfigMismatchError,
    IndexNotBuiltError,
)
from icr2_components.stores.text_analysis import DEFAULT_ANALYZER, validate_analyzer
from icr2_components.strict_mapping import Fraction, NonNegativeNumber, PathText, check_fields

#: past this many passages the in-memory store warns (measured ~28 KB of RAM per passage with 384-d vectors: ~5.5 GiB)
LARGE_STORE_PASSAGES = 200_000
#: bytes of RAM per passage measured by bench/scale.py at 100K passages (for the warning's estimate)
RAM_BYTES_PER_PASSAGE = 28_000

logger = logging.getLogger(__name__)


@dataclass
class InMemoryStoreSettings(StoreSettings):
    """``store:`` keys of an in-memory index."""

    type: str = "in_memory"
    # where the store is saved so that `icr2 search` in another process finds it (default: in the cache)
    persist_path: PathText | None = None
    bm25_k1: NonNegativeNumber = 0.9
    bm25_b: Fraction = 0.4
    # BM25's analyzer: english (stemming, stop words) or standard (lower case only); see stores/text_analysis.py.
    # Not saved with the store: the BM25 index is built from the saved passages with this setting at open.
    analyzer: str = DEFAULT_ANALYZER

    def validate(self) -> None:
        check_fields(self, "index config section 'store'", ConfigError)
        validate_analyzer(self.analyzer)
        # checked with the config, not after the corpus was read and embedded
        problem = output_file_problem(self.persist_path) if self.persist_path else None
        if problem:
            raise ConfigError(f"store.persist_path cannot be written: {problem}.")

    def validate_with_config(self, config) -> None:
        """An index used as it is (``corpus.format: existing``) is the store saved at ``persist_path``."""
        if not config.corpus.reads_documents and not self.persist_path:
            raise ConfigError(
                "corpus.format: existing with store.type: in_memory needs store.persist_path: the file an "
                "InMemoryDocumentStore was saved to (save_to_disk), which is used as it is."
            )


@register_store_backend("in_memory")
class InMemoryStoreBackend(StoreBackend):
    """The embedded store: written in batches, count-checked, saved atomically; dense search by one matmul."""

    settings_class = InMemoryStoreSettings
    builds_on_first_use = True
    settings: InMemoryStoreSettings

    def __init__(self, config, fingerprint: Callable[[], str], embedder=None) -> None:
        super().__init__(config, fingerprint, embedder)
        self._lock = threading.Lock()
        self._dense_matrix: tuple[Any, list[Document]] | None = None
        self._bm25: tuple[Any, Any] | None = None  # (the document store it indexes, FieldedBM25)

    def persist_path(self) -> Path:
        if self.settings.persist_path:
            return Path(self.settings.persist_path).expanduser()
        return cache_dir() / "indexes" / f"{self.index_name}.json"

    @property
    def index_name(self) -> str:
        return f"{self.config.name}-{self.fingerprint()}"

    def describe(self) -> str:
        return f"in_memory store saved at {self.persist_path()}"

    def index_exists(self) -> bool:
        return self.persist_path().exists()

    def open_document_store(self):
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        path = self.persist_path()
        if not path.exists():
            if not self.config.corpus.reads_documents:
                raise IndexNotBuiltError(
                    f"store.persist_path {path} of '{self.config.name}' (corpus.format: existing) does not exist: "
                    "give the file an InMemoryDocumentStore was saved to with save_to_disk."
                )
            raise IndexNotBuiltError(
                f"No in-memory index of '{self.config.name}' is saved at {path}: build it with `icr2 index --config "
                "<this config>`."
            )
        # the saved file carries the store's own settings (BM25 parameters, similarity, index name)
        store = InMemoryDocumentStore.load_from_disk(str(path))
        if self.config.corpus.reads_documents:  # an index used as it is was not built from a config
            self._refuse_another_config(store, path)
        return store

    def _refuse_another_config(self, store, path: Path) -> None:
        """The saved store's index name is ``<name>-<fingerprint>`` of the config that built it (:meth:`_new_store`):
        a store at an explicit ``persist_path`` built from another corpus, passage length or embedding would
        otherwise answer from the old passages."""
        saved = str(getattr(store, "index", "") or "")
        built_with = saved.rpartition("-")[2]
        expected = self.fingerprint()
        if built_with == expected:
            return
        known = len(built_with) == len(expected) and all(c in "0123456789abcdef" for c in built_with)
        was = (
            f"config fingerprint {built_with}"
            if known
            else "no config fingerprint (it was not written by `icr2 index`)"
        )
        raise IndexConfigMismatchError(
            f"The in-memory index at {path} was built with {was}, but '{self.config.name}' now gives fingerprint "
            f"{expected} (its corpus, passage length or embedding changed): its passages are not this config's. "
            "Rebuild it with `icr2 index --config <this config>` (the file is replaced), or set store.persist_path "
            "to another file."
        )

    def write(
        self,
        documents: Iterator[Document],
        *,
        prepare: Callable[[Iterable[Document]], Iterable[Document]] | None = None,
        progress: bool = True,
    ) -> StoreWrite:
        """A new store from the stream (nothing to resume: it is built whole), saved only once its count is right."""
        from tqdm.auto import tqdm

        store = self._new_store()
        stream = prepare(documents) if prepare is not None else documents
        result = StoreWrite()
        batch: list[Document] = []
        for document in tqdm(stream, desc=f"indexing {self.config.name}", unit=" passages", disable=not progress):
            batch.append(document)
            if result.passages_streamed + len(batch) == LARGE_STORE_PASSAGES + 1:
                logger.warning(
                    "The in-memory store '%s' passes %s passages: it holds about %.0f KB of RAM per passage "
                    "(bench/scale.py), "
                    "so ~%.1f GiB at this size and more as it grows. For a corpus this large use Elasticsearch "
                    "(store.type: elasticsearch, e.g. indexing/kilt-sample-elasticsearch.yaml).",
                    self.config.name,
                    f"{LARGE_STORE_PASSAGES:,}",
                    RAM_BYTES_PER_PASSAGE / 1000,
                    LARGE_STORE_PASSAGES * RAM_BYTES_PER_PASSAGE / 2**30,
                )
            if len(batch) >= self.config.writer.batch_size:
                store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
                result.passages_streamed += len(batch)
                batch = []
        if batch:
            store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
            result.passages_streamed += len(batch)
        stored = int(store.count_documents())
        if stored != result.passages_streamed:
            # ids are unique by construction (the handle skips repeated ones); a mismatch is a bug to report
            result.count_ok = False
            raise DocumentCountMismatchError(
                f"The in-memory store for '{self.config.name}' holds {stored} documents after "
                f"{result.passages_streamed} "
                "were streamed; nothing was saved.",
                result,
            )
        result.count_ok = True
        path = self.persist_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temporary file in the same folder, renamed over the index: never a half-written index, and never a stray
        # temporary file (removed on any failure)
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(handle)
        try:
            store.save_to_disk(tmp)
            with open(tmp, "rb") as saved:
                os.fsync(saved.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        with self._lock:
            self._dense_matrix = None
            self._bm25 = None
        self._bm25_retriever = self._embedding_retriever = None
        result.details = {"persist_path": str(path)}
        result.document_store = store
        return result

    def _new_store(self):
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        # Haystack's own BM25 (BM25Okapi, ES's k1/b) serves only bm25_retriever(); the handle's BM25 is FieldedBM25.
        # Cosine like the ES dense_vector index.
        return InMemoryDocumentStore(
            bm25_algorithm="BM25Okapi",
            bm25_parameters={"k1": self.settings.bm25_k1, "b": self.settings.bm25_b},
            embedding_similarity_function="cosine",
            index=self.index_name,
        )

    # -- retrieval ------------------------------------------------------------------------------------------

    def bm25_retriever(self, document_store):
        """Haystack's own retriever over the store (its tokenizer, content only): for pipelines that want a
        Haystack component; the handle's BM25 is :meth:`bm25_documents`."""
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

        return InMemoryBM25Retriever(document_store)

    def bm25_documents(self, document_store, query: str, top_k: int, filters: dict | None) -> list[Document]:
        """BM25 over content and title with the configured analyzer (:class:`FieldedBM25`), built once per store."""
        return self.fielded_bm25(document_store).search(query, top_k=top_k, filters=filters)

    def fielded_bm25(self, document_store):
        """The :class:`~icr2_components.stores.in_memory_bm25.FieldedBM25` of ``document_store`` (built on first
        use)."""
        from icr2_components.stores.in_memory_bm25 import FieldedBM25

        with self._lock:
            if self._bm25 is None or self._bm25[0] is not document_store:
                documents = sorted(document_store.storage.values(), key=lambda d: d.id)
                self._bm25 = (
                    document_store,
                    FieldedBM25(documents, self.settings.analyzer, k1=self.settings.bm25_k1, b=self.settings.bm25_b),
                )
            return self._bm25[1]

    def embedding_retriever(self, document_store):
        from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever

        return InMemoryEmbeddingRetriever(document_store)

    def dense_documents(
        self, document_store, query_embedding: list[float], top_k: int, filters: dict | None
    ) -> list[Document]:
        """Exact cosine search over a matrix built once (Haystack's retriever when there are filters).

        Haystack's in-memory embedding retrieval rebuilds an array from every document's embedding list on
        each query (about 2 s a query for 4K passages on 2 cores); the matrix makes it a single matmul with
        the same ranking (cosine; ties broken by id as a stable order).
        """
        if filters is not None:
            return super().dense_documents(document_store, query_embedding, top_k, filters)
        import numpy as np

        with self._lock:
            if self._dense_matrix is None:
                documents = [d for d in document_store.storage.values() if d.embedding is not None]
                if not documents:
                    raise EmptyIndexError(
                        f"Index '{self.config.name}' holds {len(document_store.storage)} passages but none has an "
                        "embedding, so dense "
                        "retrieval has nothing to search: re-index with embedding.enabled: true, or use method bm25."
                    )
                matrix = np.asarray([d.embedding for d in documents], dtype=np.float32)
                matrix /= np.linalg.norm(matrix, axis=1, keepdims=True).clip(min=1e-12)
                self._dense_matrix = (matrix, documents)
            matrix, documents = self._dense_matrix
        query = np.asarray(query_embedding, dtype=np.float32)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        scores = matrix @ query
        k = min(top_k, len(documents))
        top = np.argpartition(-scores, k - 1)[:k]
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), documents[i].id))
        return [replace(documents[i], score=float(scores[i])) for i in order]

    def random_documents(self, document_store, n: int, seed: int, exclude_ids: set[str]) -> list[Document]:
        ids = sorted(set(document_store.storage) - exclude_ids)
        chosen = random.Random(seed).sample(ids, min(n, len(ids)))
        return [document_store.storage[i] for i in chosen]
