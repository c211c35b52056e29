"""GoldAtPositionReorderer: the gold passage(s) at a chosen position, for controlled position experiments."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from icr2_components.errors import UserInputError
from icr2_components.parameters import document_list, override
from icr2_components.reorderers._base import BudgetedReorderer


def check_position(position: Any) -> int:
    """A gold position, at init and per call: a non-zero integer (1-based; negative counts from the end)."""
    if not isinstance(position, int) or isinstance(position, bool) or position == 0:
        raise UserInputError(f"position is 1-based (1 first, -1 last) and cannot be 0; got {position!r}.")
    return position


def gold_insertion_index(position: int, others: int) -> int:
    """0-based index of the first gold passage for a 1-based ``position`` (negative counts from the end).

    With ``others`` non-gold passages there are ``others + 1`` places for the gold block:
    ``position=1`` is first, ``position=-1`` (or ``others + 1``) is last.
    """
    slots = others + 1
    index = position - 1 if position > 0 else slots + position
    if not 0 <= index < slots:
        raise ValueError(
            f"position {position} is outside 1..{slots} (or -{slots}..-1) for {others} non-gold passages; "
            "lower the position or give more passages."
        )
    return index


@component
class GoldAtPositionReorderer(BudgetedReorderer):
    """
    Puts the gold passages at `position` (1-based; -1 is last) and the other passages around them in
    relevance order, as in Lost in the Middle's multi-document QA (distractors in decreasing relevance, the
    answer document moved through positions 1, 5, 10, ...). Several gold passages form one consecutive block.

    Gold passages are those whose id is in `gold_ids` (document ids or `passage_id`s), or else those with
    `meta["origin"] == "gold"` (set by `ConfounderAwareCorpusBuilder`). A run without any gold passage is
    an error: the experiment would silently measure nothing. Budgets always keep the gold passages and fill
    with the most relevant others (next-fit, never exceeded).

    Paper: Lost in the Middle, Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts": https://arxiv.org/abs/2307.03172

    Usage example:
    ```python
    from icr2_components.reorderers import GoldAtPositionReorderer

    reorderer = GoldAtPositionReorderer(position=5, budget_passages=20)
    ordered = reorderer.run(documents=corpus)["documents"]      # gold at index 4
    ordered = reorderer.run(documents=corpus, position=-1)["documents"]  # gold last
    ```
    """

    convention = "gold block at 1-based position k; others in relevance order"

    def __init__(
        self,
        position: int = 1,
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        tokenizer: str | None = None,
        relevance: str = "input_order",
    ) -> None:
        """
        :param position: 1-based position of the (first) gold passage; negative counts from the end.
        :param budget_tokens: the most tokens (of `tokenizer`, counted per rendered passage) to keep.
        :param budget_passages: the most passages to keep, gold included.
        :param tokenizer: the reader's tokenizer; needed for `budget_tokens`.
        :param relevance: order of the other passages: `input_order` or `score`.
        """
        check_position(position)
        BudgetedReorderer.__init__(self, budget_tokens, budget_passages, tokenizer, relevance)
        self.position = position

    @component.output_types(documents=list[Document], report=dict)
    def run(
        self,
        documents: list[Document],
        budget_tokens: int | None = None,
        budget_passages: int | None = None,
        position: int | None = None,
        gold_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """
        :param documents: the corpus.
        :param budget_tokens: overrides the init value.
        :param budget_passages: overrides the init value.
        :param position: overrides the init value (checked as it is).
        :param gold_ids: ids (document id or meta passage_id) of the gold passages; default: meta origin "gold".
        :returns: `documents` with the gold block at the position, and `report`.
        """
        document_list(documents)
        position = check_position(override(position, self.position))
        if gold_ids is not None:
            wanted = set(gold_ids)
            gold = [d for d in documents if d.id in wanted or (d.meta or {}).get("passage_id") in wanted]
        else:
            gold = [d for d in documents if (d.meta or {}).get("origin") == "gold"]
        if not gold and gold_ids is not None:
            raise ValueError(
                f"None of gold_ids {list(gold_ids)[:5]!r} is among the {len(documents)} documents (by id or meta "
                "passage_id); pass the ids of passages in documents."
            )
        if not gold:
            raise ValueError(
                "No gold passage found (pass gold_ids, or documents with meta origin 'gold' from the corpus builder)."
            )
        kept, report = self._select(documents, budget_tokens, budget_passages, required=gold)
        others = kept[len(gold):]
        index = gold_insertion_index(position, len(others))
        report["gold_index"] = index
        return {"documents": others[:index] + gold + others[index:], "report": report}
