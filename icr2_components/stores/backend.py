"""The store backend protocol and its registry: what an :class:`~icr2_components.stores.handle.IndexHandle` asks
of the store that holds an index, whichever store that is.

A store type (``store.type`` in an ``indexing/*.yaml`` config) is one :class:`StoreBackend` subclass, registered
under its name with :func:`register_store_backend`, together with the dataclass of its ``store:`` section. The
config, the handle, the retriever component and the CLI find it through the registry, so adding a store is one
new module and nothing else.

Usage (a whole backend: a process-local in-memory store, nothing saved):

```python
from dataclasses import dataclass

from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from icr2_components.stores.backend import StoreBackend, StoreSettings, StoreWrite, register_store_backend

_STORES: dict[str, InMemoryDocumentStore] = {}


@dataclass
class ScratchStoreSettings(StoreSettings):
    type: str = "scratch"


@register_store_backend("scratch")
class ScratchStoreBackend(StoreBackend):
    settings_class = ScratchStoreSettings
    builds_on_first_use = True

    @property
    def index_name(self): return self.config.name
    def describe(self): return f"scratch store '{self.config.name}'"
    def index_exists(self): return self.config.name in _STORES
    def open_document_store(self): return _STORES[self.config.name]
    def write(self, documents, *, prepare=None, progress=True):
        store = _STORES[self.config.name] = InMemoryDocumentStore()
        written = store.write_documents(list(prepare(documents) if prepare else documents))
        return StoreWrite(passages_streamed=written, count_ok=store.count_documents() == written, document_store=store)
    def bm25_retriever(self, document_store): return InMemoryBM25Retriever(document_store)
    def embedding_retriever(self, document_store): return InMemoryEmbeddingRetriever(document_store)
    def random_documents(self, document_store, n, seed, exclude_ids): ...
```

after which ``store: {type: scratch}`` works in any index config.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from haystack import Document

from icr2_components.stores.store_types import (
    _STORE_BACKENDS,
    StoreSettings,
    UnknownStoreBackendError,
    store_backend,
    store_backend_names,
)

if TYPE_CHECKING:
    from icr2_components.stores.config import IndexConfig
    from icr2_components.stores.embedding import PassageEmbedder


@dataclass
class StoreWrite:
    """What a backend's :meth:`StoreBackend.write` did; the handle turns it into an ``IndexReport``.

    :param passages_streamed: documents in the stream, a resumed prefix included.
    :param resumed_from: documents a previous run had confirmed, skipped this run (0 for a store that starts over).
    :param rejected: documents the store refused (0 for a store that takes every document).
    :param count_ok: whether the store holds ``passages_streamed - rejected`` documents (None: not checked).
    :param details: what only this store type reports (JSON-able), e.g. a checkpoint path or the saved file.
    :param document_store: the store just written, when the backend holds it open (the handle then keeps it
        instead of opening it again).
    """

    passages_streamed: int = 0
    resumed_from: int = 0
    rejected: int = 0
    count_ok: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)
    document_store: Any = None


class StoreBackend(ABC):
    """One store type behind :class:`~icr2_components.stores.handle.IndexHandle`.

    The handle owns what every store shares (reading and embedding the corpus, refusing an empty corpus or an
    empty index, the retrieval methods, the report); a backend only does what differs between stores: write a
    document stream, open the store, build its BM25 and embedding retrievers, sample documents.

    :param config: the validated index config; ``config.store`` is an instance of :attr:`settings_class`.
    :param fingerprint: returns a short hash of what the passages and embeddings depend on (corpus file, passage
        length, embedding model), for naming a saved index or refusing a resume of another stream; it reads the
        corpus file's size, so it is only called when needed.
    :param embedder: the handle's passage embedder, None when the config turns embeddings off.
    """

    #: the ``store.type`` this backend serves (set by :func:`register_store_backend`)
    name: ClassVar[str] = ""
    #: the dataclass of the ``store:`` section
    settings_class: ClassVar[type[StoreSettings]] = StoreSettings
    #: True: opening an index that does not exist yet builds it from the config's corpus (a laptop store);
    #: False: it is an error naming ``icr2 index`` (a server store, where building is a deliberate step)
    builds_on_first_use: ClassVar[bool] = False

    def __init__(
        self, config: IndexConfig, fingerprint: Callable[[], str], embedder: PassageEmbedder | None = None
    ) -> None:
        if not isinstance(config.store, self.settings_class):
            raise TypeError(
                f"{type(self).__name__} needs store settings of type {self.settings_class.__name__}, got "
                f"{type(config.store).__name__}; read the config with index_config_from_dict or load_index_config."
            )
        self.config = config
        self.settings = config.store
        self.fingerprint = fingerprint
        self.embedder = embedder
        self._bm25_retriever: Any = None
        self._embedding_retriever: Any = None

    # -- the index ------------------------------------------------------------------------------------------

    @property
    @abstractmethod
    def index_name(self) -> str:
        """The index's name inside the store, as reports show it."""

    @abstractmethod
    def describe(self) -> str:
        """A short phrase naming the store and the index, for messages (e.g. ``elasticsearch index 'x' at URL``)."""

    @abstractmethod
    def index_exists(self) -> bool:
        """Whether the index has been built (it may still be empty)."""

    @abstractmethod
    def open_document_store(self) -> Any:
        """The Haystack document store holding the built index; raises
        :class:`~icr2_components.stores.errors.IndexNotBuiltError` when there is none."""

    @abstractmethod
    def write(
        self,
        documents: Iterator[Document],
        *,
        prepare: Callable[[Iterable[Document]], Iterable[Document]] | None = None,
        progress: bool = True,
    ) -> StoreWrite:
        """Write the document stream into the index (replacing or resuming what is there).

        :param documents: the passages, in a deterministic order, ids unique.
        :param prepare: a costly step to apply to the documents before they are stored (the embedder); a
            backend that resumes applies it after skipping the confirmed prefix, so a resume does not pay it twice.
        :param progress: show a progress bar.
        :raises ~icr2_components.stores.errors.DocumentCountMismatchError: the store ends up holding another
            number of documents than were streamed (less those it rejected).
        """

    # -- retrieval ------------------------------------------------------------------------------------------

    @abstractmethod
    def bm25_retriever(self, document_store: Any) -> Any:
        """A Haystack BM25 retriever over ``document_store`` (``run(query, top_k, filters)``)."""

    @abstractmethod
    def embedding_retriever(self, document_store: Any) -> Any:
        """A Haystack embedding retriever over ``document_store`` (``run(query_embedding, top_k, filters)``)."""

    def bm25_documents(self, document_store: Any, query: str, top_k: int, filters: dict | None) -> list[Document]:
        """BM25-ranked documents; ``document_store`` is the one :meth:`open_document_store` gave the handle."""
        if self._bm25_retriever is None:
            self._bm25_retriever = self.bm25_retriever(document_store)
        return self._bm25_retriever.run(query=query, top_k=top_k, filters=filters)["documents"]

    def dense_documents(
        self, document_store: Any, query_embedding: list[float], top_k: int, filters: dict | None
    ) -> list[Document]:
        """Documents ranked by similarity to ``query_embedding`` (cosine in both built-in stores)."""
        if self._embedding_retriever is None:
            self._embedding_retriever = self.embedding_retriever(document_store)
        return self._embedding_retriever.run(query_embedding=query_embedding, top_k=top_k, filters=filters)["documents"]

    @abstractmethod
    def random_documents(self, document_store: Any, n: int, seed: int, exclude_ids: set[str]) -> list[Document]:
        """Up to ``n`` documents sampled with ``seed`` (the same seed, the same sample), none in ``exclude_ids``."""


def register_store_backend(name: str) -> Callable[[type[StoreBackend]], type[StoreBackend]]:
    """Class decorator: serve ``store.type: <name>`` with the decorated :class:`StoreBackend` subclass."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A store backend's name must be a non-empty string (the config's store.type), got {name!r}.")

    def register(cls: type[StoreBackend]) -> type[StoreBackend]:
        if not (isinstance(cls, type) and issubclass(cls, StoreBackend)):
            raise TypeError(f"@register_store_backend({name!r}) decorates a StoreBackend subclass, not {cls!r}.")
        settings = cls.settings_class
        if not (
            dataclasses.is_dataclass(settings) and issubclass(settings, StoreSettings) and settings is not StoreSettings
        ):
            raise TypeError(
                f"{cls.__name__}.settings_class must be a dataclass subclassing StoreSettings (its store: section), "
                f"got {settings!r}."
            )
        default_type = next(f.default for f in dataclasses.fields(settings) if f.name == "type")
        if default_type != name:
            raise TypeError(
                f"{settings.__name__}.type must default to {name!r} (the name {cls.__name__} is registered under), got "
                f"{default_type!r}."
            )
        _STORE_BACKENDS.register(name, cls)
        cls.name = name
        return cls

    return register


__all__ = [
    "StoreBackend",
    "StoreSettings",
    "StoreWrite",
    "UnknownStoreBackendError",
    "register_store_backend",
    "store_backend",
    "store_backend_names",
]
