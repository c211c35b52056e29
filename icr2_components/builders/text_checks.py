"""Small pure text checks used when choosing confounders: answer containment and near-duplicate detection.

Answers are matched after the usual SQuAD/KILT normalisation (lower case, punctuation and the articles
a/an/the removed, whitespace collapsed), as a substring, the way Lost in the Middle decides that a passage or
a reply "contains" an answer. Substring matching errs on the side of dropping a confounder ("10" matches
"1000"): a wrongly dropped confounder costs nothing, a kept passage that holds the answer breaks the test.
"""

from __future__ import annotations

import re
import string
import unicodedata
import zlib

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans({ch: " " for ch in string.punctuation + "‘’“”–—"})


def normalize_text(text: str) -> str:
    """Lower-case, strip accents' combining marks, drop punctuation and articles, collapse whitespace."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
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


def word_shingles(normalized_text: str, size: int = 5) -> frozenset[int]:
    """Hashed word n-grams of a normalised text (the whole text when it is shorter than ``size`` words)."""
    words = normalized_text.split()
    if len(words) <= size:
        return frozenset([zlib.crc32(" ".join(words).encode())]) if words else frozenset()
    return frozenset(zlib.crc32(" ".join(words[i : i + size]).encode()) for i in range(len(words) - size + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


class NearDuplicateIndex:
    """Finds an earlier text whose shingle Jaccard similarity with a new one reaches ``threshold``.

    An inverted index from shingle to the texts holding it keeps a check proportional to the shingles the new
    text shares with earlier ones, not to the number of earlier texts.
    """

    def __init__(self, threshold: float = 0.8, shingle_size: int = 5) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near_duplicate_threshold must be in (0, 1], got {threshold}.")
        self.threshold = threshold
        self.shingle_size = shingle_size
        self._postings: dict[int, list[int]] = {}
        self._sizes: list[int] = []
        self._keys: list[str] = []

    def find(self, shingles: frozenset[int]) -> str | None:
        """The key of an indexed text this one nearly duplicates, or None."""
        if not shingles:
            return None
        shared: dict[int, int] = {}
        for shingle in shingles:
            for index in self._postings.get(shingle, ()):
                shared[index] = shared.get(index, 0) + 1
        size = len(shingles)
        for index, count in shared.items():
            if count / (size + self._sizes[index] - count) >= self.threshold:
                return self._keys[index]
        return None

    def add(self, key: str, shingles: frozenset[int]) -> None:
        index = len(self._sizes)
        self._sizes.append(len(shingles))
        self._keys.append(key)
        for shingle in shingles:
            self._postings.setdefault(shingle, []).append(index)
