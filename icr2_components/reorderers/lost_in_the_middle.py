"""LostInTheMiddleReorderer: the most relevant passages at both edges of the context, the least in the middle."""

from __future__ import annotations

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

    Paper: Lost in the Middle, Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts": https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.reorderers import LostInTheMiddleReorderer

    reorderer = LostInTheMiddleReorderer(budget_tokens=3000, tokenizer="smollm2-135m-instruct")
    ordered = reorderer.run(documents=ranked_documents)["documents"]
    ```
    """

    convention = "relevance ranks 1,3,5,...,6,4,2 (rank 1 first, rank 2 last)"

    def _place(self, kept: list[Document], documents: list[Document]) -> list[Document]:
        return [kept[i] for i in lost_in_the_middle_order(len(kept))]
