"""What the learned gate reads of a question: its embedding (the bundled MiniLM) and cheap signals.

Signals (``SIGNALS``; each adds the columns of ``SIGNAL_COLUMNS``):

- ``date_words``: how many date or recency words the question has ("today", "current", "latest", "this year",
  month names...) and whether it names a year. Time-sensitive questions are what TA-ARE's "Today is <date>" is
  for (RetrievalQA, https://arxiv.org/abs/2402.16457); here they are a feature a model learns a weight for.
- ``top_score``: the top BM25 score of the question in the index (``index``): how well the corpus covers the
  question (a cheap lookup on the in-memory or Elasticsearch store, no embedding).
- ``top_dense_score``: the top dense (cosine) score of the question in the index, and its margin over the
  second: whether the passages a reader would see are close to the question (one kNN lookup with the embedding
  the gate already computed, when the index embeds with the same model; otherwise the index embeds the question).

The embedding rows are L2-normalised; the signals are raw (the logistic gate standardises every column with the
mean and scale it was trained with).

Usage:
    >>> from icr2_components.gates.need_features import NeedFeatures, date_word_count
    >>> date_word_count("Who is the current president as of 2025?")
    2
    >>> features = NeedFeatures("all-minilm-l6-v2", signals=["date_words"])
    >>> features.matrix(["Who won the 2025 Eurovision Song Contest?"]).shape     # 384 + 2 columns
    (1, 386)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

SIGNALS = ("date_words", "top_score", "top_dense_score")
SIGNAL_COLUMNS = {"date_words": ("date_words", "names_a_year"), "top_score": ("top_bm25_score",),
                  "top_dense_score": ("top_dense_score", "dense_margin")}
INDEX_SIGNALS = ("top_score", "top_dense_score")

_DATE_WORDS = re.compile(
    r"\b(today|now|current(?:ly)?|latest|recent(?:ly)?|newest|upcoming|this year|last year|next year|this season|"
    r"as of|so far|still|yet|new|january|february|march|april|may|june|july|august|september|october|november|"
    r"december|week|month)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")


def date_word_count(question: str) -> int:
    """Date and recency words (module docstring) plus years named in the question."""
    return len(_DATE_WORDS.findall(question or "")) + len(_YEAR.findall(question or ""))


def names_a_year(question: str) -> bool:
    return _YEAR.search(question or "") is not None


def check_signals(signals: Sequence[str], index: str | None) -> list[str]:
    """The signals, checked: known names, no repeats, ``top_score`` only with an index config."""
    signals = [str(s) for s in signals]
    unknown = [s for s in signals if s not in SIGNALS]
    if unknown:
        raise ValueError(f"Unknown gate signal(s) {unknown}; choose from {list(SIGNALS)}.")
    if len(set(signals)) != len(signals):
        raise ValueError(f"Gate signals are listed once each, got {signals}.")
    needing = [s for s in signals if s in INDEX_SIGNALS]
    if needing and not index:
        raise ValueError(f"The {', '.join(needing)} signal(s) need an index config (e.g. indexing/kilt-sample.yaml).")
    return signals


def feature_names(embedding_dimension: int, signals: Sequence[str]) -> list[str]:
    return [f"embedding_{i}" for i in range(embedding_dimension)] + [c for s in signals for c in SIGNAL_COLUMNS[s]]


class NeedFeatures:
    """Features of questions for the learned gate; the embedder comes from the shared model cache."""

    def __init__(self, embedding_model: str, signals: Sequence[str] = (), index: str | None = None,
                 device: str | None = None) -> None:
        self.embedding_model = embedding_model
        self.signals = check_signals(signals, index)
        self.index = index
        self.device = device
        self._embedder: SentenceTransformer | None = None
        self._index_handle = None  # opened once: parsing the index config per question would dominate the signal

    def embed(self, questions: Sequence[str]) -> np.ndarray:
        from icr2_components.models.cache import MODEL_CACHE

        if self._embedder is None:
            self._embedder = MODEL_CACHE.sentence_transformer(self.embedding_model, device=self.device)
        vectors = self._embedder.encode(list(questions), normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float64).reshape(len(questions), -1)

    def signal_values(self, questions: Sequence[str], embeddings: np.ndarray | None = None) -> np.ndarray:
        """The signal columns; ``embeddings`` (the rows :meth:`embed` gave) spare ``top_dense_score`` a second
        embedding of each question when the index embeds with the same model."""
        columns: list[list[float]] = []
        for i, question in enumerate(questions):
            row: list[float] = []
            if "date_words" in self.signals:
                row += [float(date_word_count(question)), float(names_a_year(question))]
            if "top_score" in self.signals:
                row.append(self._top_score(question))
            if "top_dense_score" in self.signals:
                row += self._top_dense_scores(question, None if embeddings is None else embeddings[i])
            columns.append(row)
        return np.asarray(columns, dtype=np.float64).reshape(len(questions), -1)

    def _index(self):
        if self._index_handle is None:
            from icr2_components.stores import open_index

            self._index_handle = open_index(self.index)
        return self._index_handle

    def _top_score(self, question: str) -> float:
        documents = self._index().retrieve(question, method="bm25", top_k=1)
        return float(documents[0].score or 0.0) if documents else 0.0

    def _top_dense_scores(self, question: str, embedding: np.ndarray | None) -> list[float]:
        index = self._index()
        if embedding is not None and index.embeds_queries_like(self.embedding_model):
            documents = index.search_dense(question, top_k=2, embedding=embedding)
        else:
            documents = index.retrieve(question, method="dense", top_k=2)
        scores = [float(d.score or 0.0) for d in documents]
        scores += [0.0] * (2 - len(scores))
        return [scores[0], scores[0] - scores[1]]

    def matrix(self, questions: Sequence[str]) -> np.ndarray:
        """One row per question: the embedding, then the signal columns."""
        embeddings = self.embed(questions)
        return np.hstack([embeddings, self.signal_values(questions, embeddings)])


__all__ = [
    "INDEX_SIGNALS",
    "SIGNALS",
    "SIGNAL_COLUMNS",
    "NeedFeatures",
    "check_signals",
    "date_word_count",
    "feature_names",
    "names_a_year",
]
