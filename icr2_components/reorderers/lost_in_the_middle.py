"""LostInTheMiddleReorderer: the most relevant passages at both edges of the context, the least in the middle."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer
from icr2_components.reorderers.ordering import lost_in_the_middle_order


@component
class LostInTheMiddleReorderer(BudgetedReorderer):
    """
    Places passages so that relevance falls towards the middle (Lost in the Middle: readers use the edges of
    the context best). Relevance ranks 1..n become `1, 3, 5, ..., 6, 4, 2`: rank 1 first, rank 2 last,
    for odd and even n alike (Haystack's convention; LangChain and LlamaIndex put rank 1 last when n is even).

    Input is taken as most-relevant-first (`relevance="input_order"`) or sorted by `Document.score`
    (`relevance="score"`). With a budget (tokens of `tokenizer`, or passages), the most relevant passages
    are kept while they fit (next-fit; the budget is never exceeded) and the rest are counted in `report`.

    Usage example:
    ```python
    from icr2_components.reorderers import LostInTheMiddleReorderer

    reorderer = LostInTheMiddleReorderer(budget_tokens=3000, tokenizer="smollm2-135m-instruct")
    ordered = reorderer.run(documents=ranked_documents)["documents"]
    ```
    """

    convention = "relevance ranks 1,3,5,...,6,4,2 (rank 1 first, rank 2 last)"

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
        :returns: `documents` in lost-in-the-middle order and `report` (kept, dropped over budget, tokens).
        """
        kept, report = self._select(documents, budget_tokens, budget_passages)
        return {"documents": [kept[i] for i in lost_in_the_middle_order(len(kept))], "report": report}
