"""Demonstration pools for TA-ARE and their per-query selection by embedding similarity.

A pool is JSONL, one question per line: ``{"question": "...", "answers": [...], "source": "..."}`` (only
``question`` is required). The [Yes] pool holds questions the model could not answer closed-book, the [No]
pool questions it could. Broken lines are counted in a :class:`SkipReport`, never dropped silently.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from icr2_components.gates.prompts import Demonstration
from icr2_components.records import SkipReport
from icr2_components.records.reading import iter_jsonl
from icr2_components.text.normalization import normalize_text

DEFAULT_POOL = "default"
_DEFAULT_POOL_FILES = {True: "yes_demonstrations.jsonl", False: "no_demonstrations.jsonl"}


def default_pool_path(needs_retrieval: bool) -> Path:
    """The small pool shipped with the package (see ``resources/gates/README.md``)."""
    return Path(__file__).resolve().parent.parent / "resources" / "gates" / _DEFAULT_POOL_FILES[needs_retrieval]


def resolve_pool_path(pool: str | os.PathLike, needs_retrieval: bool) -> Path:
    if str(pool) == DEFAULT_POOL:
        return default_pool_path(needs_retrieval)
    path = Path(pool).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"Demonstration pool {path} does not exist; pass a JSONL file of {{\"question\": ...}} lines "
            f"or '{DEFAULT_POOL}' for the bundled pool."
        )
    return path


def load_demonstration_pool(path: str | os.PathLike, needs_retrieval: bool) -> tuple[list[Demonstration], SkipReport]:
    """Read a pool file; skip (and count) malformed lines, missing or empty questions and duplicates."""
    skips = SkipReport(source=str(path))
    seen: set[str] = set()
    pool: list[Demonstration] = []
    for line_number, record in iter_jsonl(path, skips):
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            skips.skip("missing or empty question", line_number)
            continue
        key = normalize_text(question)
        if key in seen:
            skips.skip("duplicate question", line_number, question[:60])
            continue
        seen.add(key)
        pool.append(Demonstration(question.strip(), needs_retrieval, str(record.get("source", ""))))
    return pool, skips


def rank_by_similarity(query_embedding: np.ndarray, pool_embeddings: np.ndarray, excluded: Sequence[bool]) -> list[int]:
    """Pool indices, most similar first (cosine on normalised rows); excluded rows are left out.

    Ties keep pool order (a stable sort), so the choice is deterministic for a given pool and query.
    """
    if len(pool_embeddings) == 0:
        return []
    scores = pool_embeddings @ query_embedding
    order = np.argsort(-scores, kind="stable")
    return [int(i) for i in order if not excluded[int(i)]]


def is_same_question(a: str, b: str) -> bool:
    """Questions equal after the loose normalisation (``normalize_text``: punctuation to spaces, accents folded,
    articles dropped): such a demonstration would leak the judged question."""
    return normalize_text(a) == normalize_text(b)


class DemonstrationSelector:
    """Chooses [Yes] and [No] demonstrations for a query from two pools, by sentence-embedding similarity.

    The embedder is any object with ``encode(list[str], normalize_embeddings=True) -> array`` (a
    SentenceTransformer from the model cache in the gate). Pool embeddings are computed once.
    """

    def __init__(
        self, yes_pool: list[Demonstration], no_pool: list[Demonstration], embedder, no_selection: str = "similar"
    ):
        if no_selection not in ("similar", "fixed"):
            raise ValueError(f"no_selection must be 'similar' or 'fixed', got {no_selection!r}.")
        self.yes_pool = yes_pool
        self.no_pool = no_pool
        self.no_selection = no_selection
        self._embedder = embedder
        self._yes_embeddings = self._embed([d.question for d in yes_pool])
        self._no_embeddings = self._embed([d.question for d in no_pool])

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.asarray(
            self._embedder.encode(texts, normalize_embeddings=True, show_progress_bar=False), dtype=np.float32
        )

    def select(self, query: str, n_yes: int, n_no: int) -> tuple[list[Demonstration], list[Demonstration], int]:
        """Return ``(yes_examples, no_examples, excluded_count)``; the judged question is never chosen."""
        ranks = bool(n_yes) or (bool(n_no) and self.no_selection == "similar")
        # embedded only when a pool is ranked by similarity to it; the empty vector is then never read
        query_embedding = self._embed([query])[0] if ranks else np.empty(0, dtype=np.float32)
        yes_excluded = [is_same_question(d.question, query) for d in self.yes_pool]
        no_excluded = [is_same_question(d.question, query) for d in self.no_pool]
        yes_order = rank_by_similarity(query_embedding, self._yes_embeddings, yes_excluded) if n_yes else []
        if self.no_selection == "fixed":
            no_order = [i for i in range(len(self.no_pool)) if not no_excluded[i]]
        else:
            no_order = rank_by_similarity(query_embedding, self._no_embeddings, no_excluded) if n_no else []
        yes_examples = [self.yes_pool[i] for i in yes_order[:n_yes]]
        no_examples = [self.no_pool[i] for i in no_order[:n_no]]
        return yes_examples, no_examples, sum(yes_excluded) + sum(no_excluded)
