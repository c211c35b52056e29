"""Pure ordering and budget functions shared by the position reorderers.

Conventions differ between libraries, so ours are stated exactly. Every reorderer takes its input in
*relevance order* (index 0 the most relevant, as retrievers and rankers emit them), or sorts by
``Document.score`` (highest first, ties kept in input order) when ``relevance="score"``. A score must then be a
finite number: a NaN compares false with everything and would leave the order to chance, so a NaN, an infinity or
a score that is not a number is refused, naming the document.

Lost in the middle, for relevance ranks 1..n: ``1, 3, 5, ..., 6, 4, 2`` - rank 1 first and rank 2 last,
whatever the parity of n. This matches Haystack's ``LostInTheMiddleRanker``. LangChain's
``LongContextReorder`` and LlamaIndex's ``LongContextReorder`` alternate from the least relevant end, so
their most relevant passage lands first for odd n but last for even n.

Budgets are strict and next-fit: passages are kept in relevance order while they fit; the first that does
not fit ends the selection (Haystack's ``word_count_threshold`` keeps the passage that crosses the limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Real

from haystack import Document

RELEVANCE_SOURCES = ("input_order", "score")


def lost_in_the_middle_order(n: int) -> list[int]:
    """Indices (relevance ranks from 0) in lost-in-the-middle order: ``5 -> [0, 2, 4, 3, 1]``."""
    ranks = list(range(n))
    return ranks[0::2] + ranks[1::2][::-1]


def by_relevance(documents: Sequence[Document], relevance: str) -> list[Document]:
    """The documents most relevant first, from their input order or their scores."""
    if relevance not in RELEVANCE_SOURCES:
        raise ValueError(f"relevance must be one of {RELEVANCE_SOURCES}, got {relevance!r}.")
    if relevance == "input_order":
        return list(documents)
    missing = [d.id for d in documents if d.score is None]
    if missing:
        raise ValueError(
            f"relevance='score' but {len(missing)} document(s) have no score (e.g. {missing[0]}); "
            "use relevance='input_order' or put a ranker upstream."
        )
    scored: list[tuple[float, Document]] = []
    for document in documents:
        score = document.score
        if isinstance(score, bool) or not isinstance(score, Real) or not math.isfinite(float(score)):
            raise ValueError(
                f"relevance='score' but Document {document.id} has score {score!r}, not a finite number; fix the "
                "scorer upstream (or drop that document), or use relevance='input_order'."
            )
        scored.append((float(score), document))
    # sorted() is stable: ties keep input order
    return [document for _, document in sorted(scored, key=lambda pair: -pair[0])]


def select_within_budget(
    documents: Sequence[Document],
    budget_tokens: int | None,
    budget_passages: int | None,
    count_tokens: Callable[[list[Document]], list[int]] | None,
    required: Sequence[Document] = (),
) -> tuple[list[Document], int, int]:
    """Keep ``required`` documents, then ``documents`` in order while they fit (next-fit).

    :returns: ``(kept, dropped, tokens_used)``; ``kept`` lists required documents first.
    """

    def count(batch: list[Document]) -> list[int]:
        if count_tokens is None:
            raise ValueError(f"budget_tokens={budget_tokens} needs count_tokens (a tokenizer) to count with.")
        return count_tokens(batch)

    kept = list(required)
    if budget_passages is not None and len(kept) > budget_passages:
        raise ValueError(f"{len(kept)} required passages do not fit budget_passages={budget_passages}.")
    used = 0
    if budget_tokens is not None:
        used = sum(count(kept)) if kept else 0
        if used > budget_tokens:
            raise ValueError(f"The required passages need {used} tokens, more than budget_tokens={budget_tokens}.")
    candidates = list(documents)
    costs = count(candidates) if budget_tokens is not None and candidates else [0] * len(candidates)
    taken = 0
    for document, cost in zip(candidates, costs, strict=True):
        if budget_passages is not None and len(kept) >= budget_passages:
            break
        if budget_tokens is not None and used + cost > budget_tokens:
            break
        kept.append(document)
        used += cost
        taken += 1
    return kept, len(candidates) - taken, used
