"""Near-duplicate detection used when choosing confounders: word shingles, Jaccard similarity, a prefix-filter index.

Texts are compared after :func:`icr2_components.text.normalization.normalize_text`, the builder's loose
answer-containment normalisation (not the scorers' official one), so that a confounder differing from a kept passage
only in case or punctuation counts as a copy.
"""

from __future__ import annotations

import math


def word_shingles(normalized_text: str, size: int = 5) -> frozenset[int]:
    """Hashed word n-grams of a normalised text (the whole text when it is shorter than ``size`` words).

    Python's hash is salted per process; only equality within one process matters here.
    """
    words = normalized_text.split()
    if len(words) <= size:
        return frozenset([hash(tuple(words))]) if words else frozenset()
    return frozenset(map(hash, zip(*(words[i:] for i in range(size)), strict=False)))


def prefix_length(set_size: int, threshold: float) -> int:
    """Prefix-filtering length for a Jaccard threshold t (Chaudhuri et al. 2006; Bayardo et al. 2007).

    With every set sorted in one global order, two sets with Jaccard >= t share an element within the first
    ``|x| - ceil(t * |x|) + 1`` elements of each, so only those need indexing and probing: exact, not sampled.
    """
    return set_size - math.ceil(threshold * set_size - 1e-9) + 1


def shingle_prefix(shingles: frozenset[int], threshold: float) -> tuple[int, ...]:
    return tuple(sorted(shingles)[: prefix_length(len(shingles), threshold)])


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


class NearDuplicateIndex:
    """Finds an earlier text whose shingle Jaccard similarity with a new one reaches ``threshold``.

    Exact, by prefix filtering: only each set's prefix (see :func:`prefix_length`) is indexed and probed, and
    the full Jaccard similarity is computed only for texts sharing a prefix element.
    """

    def __init__(self, threshold: float = 0.8, shingle_size: int = 5) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near_duplicate_threshold must be in (0, 1], got {threshold}.")
        self.threshold = threshold
        self.shingle_size = shingle_size
        self._postings: dict[int, list[int]] = {}
        self._sets: list[frozenset[int]] = []
        self._keys: list[str] = []

    def find(self, shingles: frozenset[int], prefix: tuple[int, ...] | None = None) -> str | None:
        """The key of an indexed text this one nearly duplicates, or None."""
        if not shingles:
            return None
        if prefix is None:
            prefix = shingle_prefix(shingles, self.threshold)
        checked: set[int] = set()
        for element in prefix:
            for index in self._postings.get(element, ()):
                if index in checked:
                    continue
                checked.add(index)
                if jaccard(shingles, self._sets[index]) >= self.threshold:
                    return self._keys[index]
        return None

    def add(self, key: str, shingles: frozenset[int], prefix: tuple[int, ...] | None = None) -> None:
        if prefix is None:
            prefix = shingle_prefix(shingles, self.threshold)
        index = len(self._sets)
        self._sets.append(shingles)
        self._keys.append(key)
        for element in prefix:
            self._postings.setdefault(element, []).append(index)
