"""Retrieval methods (``bm25``, ``dense``, ``hybrid``) and their registry.

A method is a function of the index handle, the query, ``top_k`` and filters, registered under the name that
configs, the ``IndexRetriever`` component and the CLI use. It composes the two searches every store backend
offers: :meth:`IndexHandle.search_bm25` and :meth:`IndexHandle.search_dense`. Hybrid retrieval fuses both lists
with Haystack's ``DocumentJoiner`` in ``reciprocal_rank_fusion`` mode.

Usage:
    >>> from icr2_components.stores.retrieval_methods import register_retrieval_method, retrieval_method_names
    >>> @register_retrieval_method("bm25_then_dense", needs_embeddings=True)
    ... def bm25_then_dense(index, query, top_k, filters):
    ...     return (index.search_bm25(query, top_k, filters) + index.search_dense(query, top_k, filters))[:top_k]
    >>> retrieval_method_names()
    ('bm25', 'dense', 'hybrid', 'bm25_then_dense')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from haystack import Document
from haystack.components.joiners import DocumentJoiner

from icr2_components.registry import Registry


class SearchableIndex(Protocol):
    """What a retrieval method asks of an index (:class:`~icr2_components.stores.handle.IndexHandle` offers it):
    the store's BM25 ranking and its dense ranking of the query's embedding."""

    def search_bm25(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]: ...

    def search_dense(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]: ...


RetrievalFunction = Callable[[SearchableIndex, str, int, "dict | None"], list[Document]]


@dataclass(frozen=True)
class RetrievalMethod:
    """A registered retrieval method: its name, its function, and whether it needs an index with embeddings."""

    name: str
    function: RetrievalFunction
    needs_embeddings: bool = False

    def retrieve(self, index: SearchableIndex, query: str, top_k: int, filters: dict | None = None) -> list[Document]:
        return self.function(index, query, top_k, filters)


class UnknownRetrievalMethodError(ValueError):
    """No retrieval method is registered under the name; the message lists the registered ones."""


_RETRIEVAL_METHODS: Registry[RetrievalMethod] = Registry(
    "retrieval method",
    UnknownRetrievalMethodError,
    sort_names=False,
    origin=lambda method: method.function,
    unknown_message=lambda name, names: f"Unknown retrieval method {name!r}; choose one of {names}.",
    taken_message=lambda name, holder, newcomer: (
        f"Retrieval method {name!r} is already registered ({holder.__module__}.{holder.__name__})."  # type: ignore[attr-defined]
    ),
)


def register_retrieval_method(
    name: str, *, needs_embeddings: bool = False
) -> Callable[[RetrievalFunction], RetrievalFunction]:
    """Function decorator: make ``fn(index, query, top_k, filters) -> documents`` the retrieval method ``name``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A retrieval method's name must be a non-empty string, got {name!r}.")

    def register(function: RetrievalFunction) -> RetrievalFunction:
        _RETRIEVAL_METHODS.register(name, RetrievalMethod(name, function, needs_embeddings))
        return function

    return register


def retrieval_method(name: str) -> RetrievalMethod:
    """The method registered as ``name``; :class:`UnknownRetrievalMethodError` lists the registered names."""
    return _RETRIEVAL_METHODS.get(name)


def retrieval_method_names() -> tuple[str, ...]:
    """The registered retrieval methods, in registration order (bm25, dense, hybrid first)."""
    return _RETRIEVAL_METHODS.names()


# Haystack's RRF scores a document sum_i 1 / (61 + rank0_i), rescaled by 61 / (number of lists): the same
# ranking as Cormack et al.'s 1 / (60 + rank) (1-based ranks, k=60), with a passage first in every list at 1.0.
# sort_by_score is off because ties (a passage 3rd in BM25 only and another 3rd in dense only score alike) are
# broken by id below, for a ranking that does not depend on which list came first.
_RRF_JOINER = DocumentJoiner(join_mode="reciprocal_rank_fusion", sort_by_score=False)


def reciprocal_rank_fusion(ranked_lists: list[list[Document]], top_k: int) -> list[Document]:
    """Fuse ranked lists by reciprocal rank (Haystack's ``DocumentJoiner``); the best ``top_k``, ties broken by id."""
    fused = _RRF_JOINER.run(documents=ranked_lists)["documents"]
    return sorted(fused, key=lambda document: (-document.score, document.id))[:top_k]


@register_retrieval_method("bm25")
def bm25(index: SearchableIndex, query: str, top_k: int, filters: dict | None) -> list[Document]:
    """The store's BM25 ranking."""
    return index.search_bm25(query, top_k, filters)


@register_retrieval_method("dense", needs_embeddings=True)
def dense(index: SearchableIndex, query: str, top_k: int, filters: dict | None) -> list[Document]:
    """Cosine similarity of the query's embedding to the passages' (the index's embedding model)."""
    return index.search_dense(query, top_k, filters)


@register_retrieval_method("hybrid", needs_embeddings=True)
def hybrid(index: SearchableIndex, query: str, top_k: int, filters: dict | None) -> list[Document]:
    """BM25 and dense lists fused by reciprocal rank."""
    # Fuse deeper lists than asked for, so that documents ranked just below top_k in one list can rise.
    depth = max(top_k * 2, 20)
    return reciprocal_rank_fusion(
        [index.search_bm25(query, depth, filters), index.search_dense(query, depth, filters)], top_k=top_k
    )
