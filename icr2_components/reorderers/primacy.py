"""PrimacyReorderer: the most relevant passage first, relevance falling towards the question."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class PrimacyReorderer(BudgetedReorderer):
    """
    Orders passages most relevant first (the usual retriever order), for readers with a primacy bias.
    With `relevance="score"` the passages are sorted by `Document.score`, highest first (ties keep their
    input order). A budget keeps the most relevant passages that fit (next-fit, never exceeded).

    Usage example:
    ```python
    from icr2_components.reorderers import PrimacyReorderer

    ordered = PrimacyReorderer(relevance="score", budget_passages=20).run(documents=reranked)["documents"]
    ```
    """

    convention = "relevance ranks 1,2,...,n (most relevant first)"

    def __init__(
        self,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        tokenizer: str | None = None,
        relevance: str = "input_order",
    ) -> None:
        """
        :param budget_tokens: the most tokens (of `tokenizer`, counted per rendered passage) to keep.
        :param budget_passages: the most passages to keep.
        :param tokenizer: the reader's tokenizer; needed for `budget_tokens`.
        :param relevance: `input_order` (first is most relevant) or `score` (highest score first).
        """
        BudgetedReorderer.__init__(self, budget_tokens, budget_passages, tokenizer, relevance)

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self, documents: list[Document], budget_tokens: int | None = None, budget_passages: int | None = None
    ) -> dict[str, Any]:
        """
        :param documents: the passages to order.
        :param budget_tokens: overrides the init value.
        :param budget_passages: overrides the init value.
        :returns: `documents` most relevant first and `report`.
        """
        kept, report = self._select(documents, budget_tokens, budget_passages)
        return {"documents": kept, "report": report}
