"""ReverseReorderer: the input order reversed, whatever it was."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.reorderers._base import BudgetedReorderer


@component
class ReverseReorderer(BudgetedReorderer):
    """
    Reverses the order it is given (for instance a shuffled ICR2 corpus, to test order sensitivity). Unlike
    `RecencyReorderer` it never sorts: with `relevance="score"` scores decide only which passages survive the
    budget; the survivors keep their input order, reversed.

    Usage example:
    ```python
    from icr2_components.reorderers import ReverseReorderer

    reversed_docs = ReverseReorderer().run(documents=corpus)["documents"]
    ```
    """

    convention = "input positions n,...,2,1"

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
        :param relevance: which passages the budget keeps: the first ones (`input_order`) or the best scored.
        """
        BudgetedReorderer.__init__(self, budget_tokens, budget_passages, tokenizer, relevance)

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self, documents: list[Document], budget_tokens: int | None = None, budget_passages: int | None = None
    ) -> dict[str, Any]:
        """
        :param documents: the passages to reverse.
        :param budget_tokens: overrides the init value.
        :param budget_passages: overrides the init value.
        :returns: `documents` in reversed input order and `report`.
        """
        kept, report = self._select(documents, budget_tokens, budget_passages)
        survivors = {d.id for d in kept}
        return {"documents": [d for d in reversed(documents) if d.id in survivors], "report": report}
