"""RecencyReorderer: the most relevant passage last, nearest the question."""

from __future__ import annotations

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class RecencyReorderer(BudgetedReorderer):
    """
    Orders passages least relevant first and most relevant last, so the best passage sits next to the
    question (the ICR2 templates put the question after the corpus). Lost in the Middle (appendix E) finds
    7B-scale models solely recency-biased; for them this order beats lost-in-the-middle. The budget keeps the
    most relevant passages that fit (next-fit, never exceeded), and they are then placed in reverse.

    Paper: Lost in the Middle, Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts": https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.reorderers import RecencyReorderer

    ordered = RecencyReorderer(budget_passages=10).run(documents=ranked_documents)["documents"]
    ordered[-1]  # the most relevant passage
    ```
    """

    convention = "relevance ranks n,...,2,1 (most relevant last, next to the question)"

    def _place(self, kept: list[Document], documents: list[Document]) -> list[Document]:
        return kept[::-1]
