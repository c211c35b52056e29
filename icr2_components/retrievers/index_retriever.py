"""A retriever component over an index config: BM25, dense or hybrid, on whichever store the config names."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.stores.handle import IndexHandle, open_index
from icr2_components.stores.index_switch import switched_index
from icr2_components.stores.retrieval_methods import retrieval_method_names


@component
class IndexRetriever:
    """
    Retrieves passages from the index an `indexing/*.yaml` config describes, by BM25, dense or hybrid retrieval.

    The same component serves every registered store (the embedded in-memory store, Elasticsearch): only the
    config's `store.type` differs, so a YAML pipeline moves from a laptop to a cluster by pointing at another config;
    the environment
    variable `ICR2_INDEX_CONFIG` (or `--index CONFIG` on `icr2 compare`, `serve` and `quickstart`) points every
    IndexRetriever at another config without editing a YAML (see `icr2_components.stores.index_switch`). Query
    embedding uses the index's own embedding model (shared through the model cache); hybrid retrieval fuses
    the BM25 and dense lists by reciprocal rank (Haystack's `DocumentJoiner`). ICR2 selects its benchmark's
    confounding passages from the lists of strong retrievers (BM25 and dense ones among them).

    Paper: ICR2, Qiu et al. 2025, "Eliciting In-context Retrieval and Reasoning for Long-context Large Language Models":
    https://arxiv.org/abs/2501.08248

    Usage example:
    ```python
    from icr2_components.retrievers import IndexRetriever

    retriever = IndexRetriever(index="indexing/kilt-sample.yaml", method="hybrid", top_k=5)
    retriever.warm_up()   # opens (and on first use builds) the sample index
    docs = retriever.run(query="who got the first nobel prize in physics")["documents"]
    ```
    """

    def __init__(
        self, index: str = "kilt-sample", method: str = "hybrid", top_k: int = 10, name: str | None = None
    ) -> None:
        """
        :param index: Path of an index config YAML; when `ICR2_INDEX_CONFIG` names another config, that one is
            used (and serialised) instead.
        :param method: A registered retrieval method: `bm25`, `dense` or `hybrid` (see
            `icr2_components.stores.retrieval_methods`).
        :param top_k: Passages returned per query.
        :param name: Written into each document's `meta["retriever"]` (defaults to the method), so a corpus
            builder can tell which retriever found a passage.
        """
        if method not in retrieval_method_names():
            raise ValueError(f"method must be one of {retrieval_method_names()}, got {method!r}.")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        if not isinstance(index, str) or not index:
            raise ValueError("index must be the path of an index config YAML (e.g. indexing/kilt-sample.yaml).")
        # the library-wide switch (icr2_components.stores.index_switch); unset: exactly the given index
        self.index = switched_index(index)
        self.method = method
        self.top_k = top_k
        self.name = name or method
        self._handle: IndexHandle | None = None

    def warm_up(self) -> None:
        if self._handle is None:
            self._handle = open_index(self.index)
            self._handle.document_store  # noqa: B018 - open (or build) the store now, not on the first query

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None, method: str | None = None) -> dict[str, Any]:
        """
        :param query: The query text.
        :param top_k: Overrides the init value.
        :param method: Overrides the init value.
        :returns: `documents`, best first, each with `meta["retriever"]` and `meta["retrieval_rank"]`.
        """
        self.warm_up()
        documents = self._handle.retrieve(query, method=method or self.method, top_k=top_k or self.top_k)
        tagged = []
        for rank, document in enumerate(documents, start=1):
            meta = dict(document.meta, retriever=self.name, retrieval_rank=rank)
            tagged.append(Document(id=document.id, content=document.content, meta=meta, score=document.score))
        return {"documents": tagged}
