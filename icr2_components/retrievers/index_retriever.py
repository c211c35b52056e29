"""A retriever component over an index config or a Haystack document store the user already has: BM25, dense or
hybrid, with Haystack filters at run time."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from icr2_components.stores.handle import IndexHandle, open_index
from icr2_components.stores.index_switch import switched_index
from icr2_components.stores.retrieval_methods import reciprocal_rank_fusion, retrieval_method_names
from icr2_components.text.blank import is_blank

STORE_METHODS = ("bm25", "dense", "hybrid")
"""The methods over a user's own document store: its BM25 retriever, its embedding retriever, or both fused."""
_STORE_RETRIEVERS = {
    # store class -> (module, BM25 retriever, embedding retriever), all Haystack's own
    "InMemoryDocumentStore": ("haystack.components.retrievers.in_memory", "InMemoryBM25Retriever",
                              "InMemoryEmbeddingRetriever"),
    "ElasticsearchDocumentStore": ("haystack_integrations.components.retrievers.elasticsearch",
                                   "ElasticsearchBM25Retriever", "ElasticsearchEmbeddingRetriever"),
}


def check_filters(filters: Any) -> dict | None:
    """``filters`` when it is None or a Haystack filter (a comparison or a logical condition), else a clear error."""
    if filters is None:
        return None
    shaped = isinstance(filters, dict) and "operator" in filters and ("field" in filters or "conditions" in filters)
    if not shaped:
        raise ValueError(
            "filters must be a Haystack filter: {'field': 'meta.title', 'operator': '==', 'value': 'Paris'} or "
            f"{{'operator': 'AND', 'conditions': [...]}}; got {filters!r}."
        )
    return filters


@component
class IndexRetriever:
    """
    Retrieves passages by BM25, dense or hybrid retrieval from the index an index config describes, or from a
    Haystack document store you already have.

    Over an index config (a shipped name such as `kilt-sample`, or a path to an `indexing/*.yaml`) the same
    component serves every registered store (the embedded in-memory store, Elasticsearch): only the config's
    `store.type` differs, so a YAML pipeline moves from a laptop to a cluster by pointing at another config; the
    environment variable `ICR2_INDEX_CONFIG` (or `--index CONFIG` on `icr2 compare`, `serve` and `quickstart`)
    points every IndexRetriever at another config without editing a YAML (see `icr2_components.stores.index_switch`).
    Query embedding uses the index's own embedding model; hybrid retrieval fuses the BM25 and dense lists by
    reciprocal rank (Haystack's `DocumentJoiner`). ICR2 selects its benchmark's confounding passages from the lists
    of strong retrievers (BM25 and dense ones among them).

    Over your own `document_store` (Haystack's `InMemoryDocumentStore` or elasticsearch-haystack's
    `ElasticsearchDocumentStore`) it asks that store's own Haystack retrievers: `bm25`, `dense` (give the query's
    `query_embedding`, from the text embedder that embedded your documents) or `hybrid` (both, fused by reciprocal
    rank). Any other store: put its own Haystack retriever upstream of the corpus builder instead.

    `filters` (Haystack's filter syntax) at run time keep only the documents that match them, in either case.
    `run_async` awaits an Elasticsearch store's async client, so `Pipeline.run_async` calls overlap.

    Paper: ICR2, Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models":
    https://arxiv.org/abs/2501.08248

    Usage example:
    ```python
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from icr2_components.retrievers import IndexRetriever

    retriever = IndexRetriever(index="kilt-sample", method="hybrid", top_k=5)
    retriever.warm_up()   # opens (and on first use builds) the sample index
    docs = retriever.run(query="who got the first nobel prize in physics")["documents"]

    store = InMemoryDocumentStore()
    store.write_documents([Document(content="Paris is the capital of France.", meta={"lang": "en"})])
    mine = IndexRetriever(document_store=store, method="bm25", top_k=3)
    docs = mine.run(query="capital of France", filters={"field": "meta.lang", "operator": "==", "value": "en"})
    ```
    """

    def __init__(
        self,
        index: str | None = "kilt-sample",
        method: str = "hybrid",
        top_k: int = 10,
        name: str | None = None,
        document_store: Any = None,
    ) -> None:
        """
        :param index: A shipped index config's name (`kilt-sample`) or the path of an index config YAML; when
            `ICR2_INDEX_CONFIG` names another config, that one is used (and serialised) instead. Not used (and
            serialised as None) when `document_store` is given.
        :param method: A registered retrieval method: `bm25`, `dense` or `hybrid` (see
            `icr2_components.stores.retrieval_methods`); over a `document_store`, one of `bm25`, `dense`, `hybrid`.
        :param top_k: Passages returned per query.
        :param name: Written into each document's `meta["retriever"]` (defaults to the method), so a corpus
            builder can tell which retriever found a passage.
        :param document_store: A Haystack `InMemoryDocumentStore` or `ElasticsearchDocumentStore` holding your
            documents, searched instead of an index config.
        :raises ValueError: an unknown method, a `top_k` below 1, no index, or a store this retriever cannot ask.
        """
        if document_store is not None:
            self._store_retrievers = _store_retriever_names(document_store)
            if method not in STORE_METHODS:
                raise ValueError(f"method must be one of {list(STORE_METHODS)} over a document store, got {method!r}.")
            index = None
        elif method not in retrieval_method_names():
            raise ValueError(f"method must be one of {list(retrieval_method_names())}, got {method!r}.")
        elif not isinstance(index, str) or not index:
            raise ValueError("index must be a shipped index config's name (kilt-sample) or the path of an index "
                             "config YAML, or give a document_store.")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a whole number >= 1, got {top_k!r}.")
        # the library-wide switch (icr2_components.stores.index_switch); unset: exactly the given index
        self.index = switched_index(index) if index is not None else None
        self.method = method
        self.top_k = top_k
        self.name = name or method
        self.document_store = document_store
        self._handle: IndexHandle | None = None
        self._bm25: Any = None
        self._dense: Any = None

    def warm_up(self) -> None:
        if self.document_store is not None:
            if self._bm25 is None:
                module_name, bm25_name, dense_name = self._store_retrievers
                module = importlib.import_module(module_name)
                self._bm25 = getattr(module, bm25_name)(document_store=self.document_store)
                self._dense = getattr(module, dense_name)(document_store=self.document_store)
            return
        self._index_handle()

    def _index_handle(self) -> IndexHandle:
        """The index config's handle, opened on first use (with its store: built now, not at the first query).

        :raises ValueError: when the retriever has neither an index config nor a document store.
        """
        if self._handle is None:
            if self.index is None:
                raise ValueError("IndexRetriever needs index= (an index config) or document_store=, got neither.")
            self._handle = open_index(self.index)
            self._handle.document_store  # noqa: B018 - open (or build) the store now, not on the first query
        return self._handle

    def _checked(self, query: Any, top_k: int | None, method: str | None, filters: Any,
                 query_embedding: Any) -> tuple[str, int, dict | None]:
        if not isinstance(query, str) or is_blank(query):
            raise ValueError(f"IndexRetriever.run needs a non-empty query string (one that shows some text), got "
                             f"{query!r:.60}.")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a whole number >= 1, got {top_k!r}.")
        method = method or self.method
        allowed = STORE_METHODS if self.document_store is not None else retrieval_method_names()
        if method not in allowed:
            raise ValueError(f"method must be one of {list(allowed)}, got {method!r}.")
        if self.document_store is None and query_embedding is not None:
            raise ValueError("query_embedding is for a document_store of your own: an index config embeds the query "
                             "with its own embedding model.")
        if self.document_store is not None and method != "bm25" and not query_embedding:
            raise ValueError(f"method={method!r} over a document store needs the query's query_embedding (from the "
                             "text embedder that embedded the store's documents); or use method bm25.")
        return method, top_k or self.top_k, check_filters(filters)

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None, method: str | None = None, filters: dict | None = None,
            query_embedding: list[float] | None = None) -> dict[str, Any]:
        """
        :param query: The query text.
        :param top_k: Overrides the init value.
        :param method: Overrides the init value.
        :param filters: A Haystack filter the documents must match (e.g. `{"field": "meta.title", "operator": "in",
            "value": ["Paris", "Berlin"]}`), applied by the store's retrieval.
        :param query_embedding: The query's embedding, for `dense` and `hybrid` over a `document_store`.
        :returns: `documents`, best first, each with `meta["retriever"]` and `meta["retrieval_rank"]`.
        :raises ValueError: an empty query, a bad override or filter, or a dense method without its embedding.
        """
        method, top_k, filters = self._checked(query, top_k, method, filters, query_embedding)
        self.warm_up()
        if self.document_store is None:
            documents = self._index_handle().retrieve(query, method=method, top_k=top_k, filters=filters)
        else:
            lists = []
            if method in ("bm25", "hybrid"):
                lists.append(self._bm25.run(query=query, top_k=_depth(method, top_k), filters=filters)["documents"])
            if method in ("dense", "hybrid"):
                assert query_embedding is not None  # _checked refuses a dense method without it
                lists.append(self._dense.run(query_embedding=list(query_embedding), top_k=_depth(method, top_k),
                                             filters=filters)["documents"])
            documents = _fused(lists, top_k)
        return {"documents": self._tagged(documents)}

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, top_k: int | None = None, method: str | None = None,
                        filters: dict | None = None, query_embedding: list[float] | None = None) -> dict[str, Any]:
        """
        `run` awaited: over a document store its Haystack retrievers' `run_async` (Elasticsearch's async client;
        BM25 and dense of `hybrid` together); over an index config, `run` in a worker thread. The same inputs,
        checks and output as `run`.
        """
        method, top_k, filters = self._checked(query, top_k, method, filters, query_embedding)
        if self.document_store is None:
            return await asyncio.to_thread(self.run, query, top_k, method, filters)
        self.warm_up()
        calls = []
        if method in ("bm25", "hybrid"):
            calls.append(self._bm25.run_async(query=query, top_k=_depth(method, top_k), filters=filters))
        if method in ("dense", "hybrid"):
            assert query_embedding is not None  # _checked refuses a dense method without it
            calls.append(self._dense.run_async(query_embedding=list(query_embedding), top_k=_depth(method, top_k),
                                               filters=filters))
        lists = [result["documents"] for result in await asyncio.gather(*calls)]
        return {"documents": self._tagged(_fused(lists, top_k))}

    def _tagged(self, documents: list[Document]) -> list[Document]:
        tagged = []
        for rank, document in enumerate(documents, start=1):
            meta = dict(document.meta, retriever=self.name, retrieval_rank=rank)
            tagged.append(Document(id=document.id, content=document.content, meta=meta, score=document.score))
        return tagged

    def to_dict(self) -> dict[str, Any]:
        """Haystack's default serialisation; a document store as its own `to_dict` (its connection and settings,
        not its documents, as Haystack's retrievers serialise one)."""
        parameters = {"index": self.index, "method": self.method, "top_k": self.top_k, "name": self.name}
        if self.document_store is not None:  # an index config's retriever serialises as it always has
            parameters["document_store"] = self.document_store
        return default_to_dict(self, **parameters)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexRetriever:
        return default_from_dict(cls, data)


def _depth(method: str, top_k: int) -> int:
    """Fuse deeper lists than asked for, so that documents ranked just below top_k in one list can rise (as the
    index config's hybrid method does)."""
    return max(top_k * 2, 20) if method == "hybrid" else top_k


def _fused(lists: list[list[Document]], top_k: int) -> list[Document]:
    return lists[0][:top_k] if len(lists) == 1 else reciprocal_rank_fusion(lists, top_k=top_k)


def _store_retriever_names(document_store: Any) -> tuple[str, str, str]:
    """The Haystack retrievers of ``document_store``'s class, or a clear error for a store this component cannot
    ask."""
    for cls in type(document_store).__mro__:
        if cls.__name__ in _STORE_RETRIEVERS and cls.__module__.startswith(("haystack.", "haystack_integrations.")):
            return _STORE_RETRIEVERS[cls.__name__]
    raise ValueError(
        f"IndexRetriever searches Haystack's InMemoryDocumentStore or an ElasticsearchDocumentStore, not "
        f"{type(document_store).__name__}: put that store's own Haystack retriever upstream of the corpus builder "
        "(its documents go to the builder's documents input)."
    )
