"""RecencyReorderer: the most relevant passage last, nearest the question."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class RecencyReorderer(BudgetedReorderer):
    """
    Orders passages least relevant first and most relevant last, so the best passage sits next to the
    question (the ICR2 templates put the question after the corpus). Lost in the Middle (appendix E) finds
    7B-scale models solely recency-biased; for them this order beats lost-in-the-middle. The budget keeps the
    most relevant passages that fit (next-fit, never exceeded), and they are then placed in reverse.

    Usage example:
    ```python
    from icr2_components.reorderers import RecencyReorderer

    ordered = RecencyReorderer(budget_passages=10).run(documents=ranked_documents)["documents"]
    ordered[-1]  # the most relevant passage
    ```
    """

    convention = "relevance ranks n,...,2,1 (most relevant last, next to the question)"

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
        :returns: `documents` most relevant last and `report`.
        """
        kept, report = self._select(documents, budget_tokens, budget_passages)
        return {"documents": kept[::-1], "report": report}
