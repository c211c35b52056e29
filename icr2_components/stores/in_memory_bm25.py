"""The in-memory store's BM25: ``bm25s`` (sparse precomputed scores) over the passage text and its title.

Haystack's ``InMemoryDocumentStore`` scores BM25 by walking every document's token counts in Python on each
query (a few queries per second on 5K passages, and its own tokenizer: no stemming, no stop words, content
only). :class:`FieldedBM25` ranks like the Elasticsearch store instead:

- the same analyzer (:class:`~icr2_components.stores.text_analysis.TextAnalyzer`, a replica of Elasticsearch's
  ``english`` or ``standard`` analyzer);
- the same formula: Lucene's BM25 (``bm25s`` method ``lucene``: idf ``log(1 + (N - df + 0.5) / (df + 0.5))``,
  the same ``k1``/``b``);
- the same fields: content and title scored separately and added (``multi_match`` of type ``most_fields``).

``bm25s`` (Lù, 2024, https://arxiv.org/abs/2407.03618) computes every term's score in every document once, at
indexing, as a sparse matrix; a query sums a few of its rows. The index is built from the saved passages when
the store is opened, with the config's analyzer and ``k1``/``b``, so a saved store is never searched with the
token statistics of other settings.

Usage:
    >>> from icr2_components.stores.in_memory_bm25 import FieldedBM25
    >>> bm25 = FieldedBM25(documents, analyzer="english", k1=0.9, b=0.4)   # Haystack Documents, title in meta
    >>> [d.id for d in bm25.search("who got the first nobel prize in physics", top_k=5)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from haystack import Document

from icr2_components.extras import require_extra
from icr2_components.stores.text_analysis import CONTENT_FIELD, DEFAULT_ANALYZER, TITLE_FIELD, TextAnalyzer


class FieldedBM25:
    """BM25 over the content and the title of a fixed list of documents (``bm25s``, Lucene's formula).

    :param documents: the passages (``content``; the title in ``meta["title"]``, may be missing).
    :param analyzer: ``english`` or ``standard`` (see :mod:`~icr2_components.stores.text_analysis`), or a
        :class:`TextAnalyzer`.
    :param k1, b: BM25 parameters (Elasticsearch's store default: 0.9, 0.4).
    :param progress: show bm25s's progress bars while indexing.

    Usage:
        >>> from haystack import Document
        >>> bm25 = FieldedBM25([Document(id="1", content="The prize in physics", meta={"title": "Nobel Prize"})])
        >>> bm25.search("nobel prizes", top_k=1)[0].id
        '1'
    """

    def __init__(
        self,
        documents: Sequence[Document],
        analyzer: str | TextAnalyzer = DEFAULT_ANALYZER,
        k1: float = 0.9,
        b: float = 0.4,
        progress: bool = False,
    ) -> None:
        import logging

        require_extra("index", "The in-memory BM25 index", ("bm25s",))
        import bm25s

        # bm25s sets its own logger to DEBUG at import, so every index build would print through the application's
        # handlers; its messages are routine, warnings and errors still pass
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        if not isinstance(k1, (int, float)) or k1 < 0:
            raise ValueError(f"k1 must be a number >= 0 (Elasticsearch's default 1.2, this project's 0.9), got {k1!r}.")
        if not isinstance(b, (int, float)) or not 0 <= b <= 1:
            raise ValueError(f"b must be a number in [0, 1] (length normalisation), got {b!r}.")
        self.analyzer = analyzer if isinstance(analyzer, TextAnalyzer) else TextAnalyzer(analyzer)
        self.k1, self.b = float(k1), float(b)
        self.documents = list(documents)
        self._ids = [d.id for d in self.documents]
        self._indexes: dict[str, Any] = {}
        for field in (CONTENT_FIELD, TITLE_FIELD):
            texts = [self._field_text(d, field) for d in self.documents]
            if not any(texts):
                continue  # e.g. documents without titles: the field adds nothing
            index = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
            index.index([self.analyzer(text) for text in texts], show_progress=progress)
            self._indexes[field] = index

    @staticmethod
    def _field_text(document: Document, field: str) -> str:
        value = document.content if field == CONTENT_FIELD else (document.meta or {}).get(field)
        return value if isinstance(value, str) else ""

    def __len__(self) -> int:
        return len(self.documents)

    def scores(self, query: str):
        """Every document's BM25 score for ``query`` (a numpy array in document order; 0 for no matching term)."""
        import numpy as np

        tokens = self.analyzer(query)
        total = np.zeros(len(self.documents), dtype=np.float32)
        if not tokens:
            return total
        for index in self._indexes.values():
            ids = index.get_tokens_ids(tokens)
            if ids:
                total += index.get_scores(ids)
        return total

    def search(self, query: str, top_k: int = 10, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` documents matching at least one term of ``query``, best first (ties: by id), each with
        its BM25 score; ``filters`` (Haystack's filter syntax) keeps only the documents that match them."""
        import numpy as np

        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}.")
        scores = self.scores(query)
        candidates = np.flatnonzero(scores > 0)
        if filters:
            from haystack.utils.filters import document_matches_filter

            candidates = np.asarray(
                [i for i in candidates.tolist() if document_matches_filter(filters, self.documents[i])], dtype=np.int64
            )
        if candidates.size == 0:
            return []
        if candidates.size > top_k:
            # a few more than top_k, so that ties at the cut are broken by id like the rest
            cut = np.partition(scores[candidates], -top_k)[-top_k]
            candidates = candidates[scores[candidates] >= cut]
        order = sorted(candidates.tolist(), key=lambda i: (-float(scores[i]), self._ids[i]))[:top_k]
        return [replace(self.documents[i], score=float(scores[i])) for i in order]
