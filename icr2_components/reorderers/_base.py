"""Shared parameters of the position reorderers: an optional budget and where relevance comes from."""

from __future__ import annotations

from typing import Any, ClassVar

from haystack import Document, component

from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.parameters import document_list, one_of, override, positive_int
from icr2_components.reorderers.ordering import RELEVANCE_SOURCES, by_relevance, select_within_budget


def check_budget(budget_tokens: int | None, budget_passages: int | None) -> None:
    """A reorderer's budgets, at init and per call: each a positive integer, or None for no limit."""
    positive_int(budget_tokens, "budget_tokens", optional=True, hint=" (no limit)")
    positive_int(budget_passages, "budget_passages", optional=True, hint=" (no limit)")


class BudgetedReorderer:
    """Not a component itself: each reorderer subclasses it, is decorated with ``@component`` and defines
    ``_place`` (where the kept passages go); budget selection, ``run`` and serialisation are shared here.

    :param budget_tokens: the most tokens (of `tokenizer`, counted per rendered passage) to keep.
    :param budget_passages: the most passages to keep.
    :param tokenizer: the reader's tokenizer; needed for `budget_tokens`.
    :param relevance: `input_order` (first is most relevant) or `score` (highest score first).
    """

    convention = ""

    backend_role: ClassVar[str] = "token_budget"
    """Under a backend (`icr2_components.backends`), a token budget counts with that backend model's tokenizer."""

    def __init__(
        self,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        tokenizer: str | None = None,
        relevance: str = "input_order",
    ) -> None:
        check_budget(budget_tokens, budget_passages)
        if budget_tokens is not None and not tokenizer:
            raise ValueError("budget_tokens counts the reader's tokens: set tokenizer (e.g. 'smollm2-135m-instruct').")
        one_of(relevance, "relevance", RELEVANCE_SOURCES)
        self.budget_tokens = budget_tokens
        self.budget_passages = budget_passages
        self.tokenizer = tokenizer
        self.relevance = relevance
        self._counter: PassageTokenCounter | None = None

    def _place(self, kept: list[Document], documents: list[Document]) -> list[Document]:
        """Order ``kept`` (most relevant first) for the prompt; ``documents`` is the input, for reference."""
        raise NotImplementedError

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self, documents: list[Document], budget_tokens: int | None = None, budget_passages: int | None = None
    ) -> dict[str, Any]:
        """
        :param documents: the passages to order.
        :param budget_tokens: overrides the init value (checked as it is).
        :param budget_passages: overrides the init value (checked as it is).
        :returns: `documents` in this reorderer's order (see its `convention`) and `report`.
        :raises ValueError: a budget that is not a positive integer.
        """
        kept, report = self._select(documents, budget_tokens, budget_passages)
        return {"documents": self._place(kept, documents), "report": report}

    def warm_up(self) -> None:
        if self._counter is None and self.tokenizer:
            self._counter = PassageTokenCounter.for_model(self.tokenizer)

    def _select(
        self,
        documents: list[Document],
        budget_tokens: int | None,
        budget_passages: int | None,
        required: list[Document] | None = None,
    ) -> tuple[list[Document], dict[str, Any]]:
        """Relevance-ordered documents within the budget, and the report."""
        document_list(documents)
        for document in documents:
            if document.content is None:
                raise ValueError(f"Document {document.id} has no text; a reorderer cannot place or count it.")
        ids = [d.id for d in documents]
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"Document ids repeat ({repeated[:3]}); de-duplicate upstream (the corpus builder does).")
        check_budget(budget_tokens, budget_passages)
        tokens = override(budget_tokens, self.budget_tokens)
        passages = override(budget_passages, self.budget_passages)
        if tokens is not None and not self.tokenizer:
            raise ValueError("budget_tokens needs the reorderer's tokenizer; set tokenizer in __init__.")
        self.warm_up()
        required = required or []
        required_ids = {d.id for d in required}
        ordered = by_relevance([d for d in documents if d.id not in required_ids], self.relevance)
        kept, dropped, used = select_within_budget(
            ordered, tokens, passages, self._counter.count_many if self._counter else None, required=required
        )
        report = {
            "input": len(documents),
            "kept": len(kept),
            "dropped_over_budget": dropped,
            "tokens_used": used if tokens is not None else None,
            "convention": self.convention,
        }
        return kept, report
