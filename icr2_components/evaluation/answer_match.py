"""Answer match, as RetrievalQA scores QA: a prediction is correct when it contains a gold answer.

Both sides are normalised SQuAD-style (lower case, no punctuation, no articles, collapsed white space), so
"The Eiffel Tower." matches "eiffel tower". Like RetrievalQA (and Self-RAG, PopQA before it) containment is
plain substring containment of the normalised strings: lenient on purpose, since small models pad answers.
"""

from __future__ import annotations

from typing import Iterable

from icr2_components.text.normalization import normalize_answer


def answer_match(prediction: str, ground_truths: Iterable[str]) -> bool:
    """True when any non-empty normalised gold answer is a substring of the normalised prediction."""
    normalized_prediction = normalize_answer(prediction)
    for truth in ground_truths:
        normalized = normalize_answer(str(truth))
        if normalized and normalized in normalized_prediction:
            return True
    return False
