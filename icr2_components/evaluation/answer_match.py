"""Answer match, as RetrievalQA scores QA: a prediction is correct when it contains a gold answer.

Both sides are normalised SQuAD-style (lower case, no punctuation, no articles, collapsed white space), so
"The Eiffel Tower." matches "eiffel tower". Like RetrievalQA (and Self-RAG, PopQA before it) containment is
plain substring containment of the normalised strings: lenient on purpose, since small models pad answers.
"""

from __future__ import annotations

import re
import string
from typing import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation and articles, collapse white space."""
    text = text.lower()
    text = "".join(" " if ch in _PUNCTUATION else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_match(prediction: str, ground_truths: Iterable[str]) -> bool:
    """True when any non-empty normalised gold answer is a substring of the normalised prediction."""
    normalized_prediction = normalize_answer(prediction)
    for truth in ground_truths:
        normalized = normalize_answer(str(truth))
        if normalized and normalized in normalized_prediction:
            return True
    return False
