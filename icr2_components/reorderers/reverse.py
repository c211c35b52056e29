"""ReverseReorderer: the input order reversed, whatever it was."""

from __future__ import annotations

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class ReverseReorderer(BudgetedReorderer):
    """
    Reverses the order it is given (for instance a shuffled ICR2 corpus, to test order sensitivity). Unlike
    `RecencyReorderer` it never sorts: with `relevance="score"` scores decide only which passages survive the
    budget; the survivors keep their input order, reversed.

    Paper: Lost in the Middle, Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts": https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.reorderers import ReverseReorderer

    reversed_docs = ReverseReorderer().run(documents=corpus)["documents"]
    ```
    """

    convention = "input positions n,...,2,1"

    def _place(self, kept: list[Document], documents: list[Document]) -> list[Document]:
        survivors = {d.id for d in kept}
        return [d for d in reversed(documents) if d.id in survivors]
