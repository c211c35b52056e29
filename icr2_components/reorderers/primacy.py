"""PrimacyReorderer: the most relevant passage first, relevance falling towards the question."""

from __future__ import annotations

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class PrimacyReorderer(BudgetedReorderer):
    """
    Orders passages most relevant first (the usual retriever order), for readers with a primacy bias.
    With `relevance="score"` the passages are sorted by `Document.score`, highest first (ties keep their
    input order). A budget keeps the most relevant passages that fit (next-fit, never exceeded).

    Paper: Lost in the Middle, Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts": https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.reorderers import PrimacyReorderer

    ordered = PrimacyReorderer(relevance="score", budget_passages=20).run(documents=reranked)["documents"]
    ```
    """

    convention = "relevance ranks 1,2,...,n (most relevant first)"

    def _place(self, kept: list[Document], documents: list[Document]) -> list[Document]:
        return kept
