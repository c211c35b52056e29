"""One text normalisation for the whole project, SQuAD/KILT style, and answer containment built on it.

Lower case, accents' combining marks stripped, punctuation and the articles a/an/the removed, whitespace
collapsed. The corpus builder drops a confounder that "contains an answer" by exactly the test the evaluation uses
to score a reply (``normalize_answer`` is this same function under the name the metrics use), so "Rontgen"
matches "Röntgen" on both sides. Containment is a plain substring test, the way Lost in the Middle and
RetrievalQA decide that a passage or a reply contains an answer: it errs on the side of a match ("10" in
"1000"), which drops a confounder too many rather than keeping one that holds the answer.
"""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans({ch: " " for ch in string.punctuation + "‘’“”–—"})
# the combining-mark blocks (accents left over by NFKD); a regex is much faster than a per-character test
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")


def normalize_text(text: str) -> str:
    """Lower-case, strip accents' combining marks, drop punctuation and articles, collapse whitespace."""
    if not text.isascii():
        text = _COMBINING.sub("", unicodedata.normalize("NFKD", text))
    text = text.lower()
    text = text.translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalized_answers(answers: list[str] | None) -> list[str]:
    """Normalised, non-empty, distinct answers (an answer that normalises to nothing cannot be matched)."""
    result: list[str] = []
    for answer in answers or []:
        norm = normalize_text(answer)
        if norm and norm not in result:
            result.append(norm)
    return result


def contains_any(normalized_text: str, normalized_answer_list: list[str]) -> bool:
    """Whether any normalised answer is a substring of the normalised text."""
    return any(answer in normalized_text for answer in normalized_answer_list)


def contains_answer(text: str, answers: list[str] | None) -> bool:
    """``contains_answer("The Eiffel Tower, Paris.", ["paris"]) -> True``."""
    return contains_any(normalize_text(text), normalized_answers(answers))


# The metrics' name for it: one function, so a prediction is scored by the test that chose the confounders.
normalize_answer = normalize_text
