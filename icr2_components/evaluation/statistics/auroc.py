"""AUROC of a needs-retrieval score: the point, its bootstrap interval, and the paired difference of two scores on
the same questions (DeLong's test, with a bootstrap interval of the difference).

Small pure functions over arrays, used by the gate comparisons (``evaluation.gates.gate_tradeoff``) and the decision
metrics (``evaluation.gates.retrieval_decisions``):

- :func:`auroc_rows`: the Mann-Whitney AUROC (ties count one half), vectorised over rows, so a bootstrap can
  evaluate thousands of resamples at once.
- :func:`auroc_interval`: the AUROC of one score with a bootstrap interval over questions (both classes resampled
  together, as the questions come).
- :func:`auroc_difference`: AUROC(a) - AUROC(b) on the same labelled questions: the bootstrap interval of the
  difference (questions resampled with both scores) and DeLong's two-sided p-value (DeLong, DeLong and
  Clarke-Pearson 1988, "Comparing the areas under two or more correlated ROC curves", Biometrics 44:837-845),
  which accounts for the two scores being computed on the same questions.

Usage:
    >>> from icr2_components.evaluation.statistics.auroc import auroc_difference
    >>> auroc_difference(learned_scores, ta_are_scores, labels)["p_value"]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED, bootstrap_interval, interval


def auroc_rows(scores: np.ndarray, labels: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised AUROC (Mann-Whitney, ties half) over the last axis; NaN where a row lacks a class."""
    from scipy.stats import rankdata

    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    ranks = rankdata(scores, axis=-1)
    positives = labels.sum(axis=-1)
    negatives = labels.shape[-1] - positives
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = ((ranks * labels).sum(axis=-1) - positives * (positives + 1) / 2) / (positives * negatives)
    return np.where((positives > 0) & (negatives > 0), auc, np.nan)


def _known(*columns: Sequence[float | bool | None]) -> list[np.ndarray]:
    """The columns restricted to the questions where every column is known (None left out), as float arrays."""
    if len({len(c) for c in columns}) != 1:
        raise ValueError("AUROC inputs must hold one value per question, all of one length.")
    keep = [i for i in range(len(columns[0])) if all(c[i] is not None for c in columns)]
    return [np.asarray([float(c[i]) for i in keep], dtype=float) for c in columns]


def auroc_interval(scores: Sequence[float | None], labels: Sequence[bool | None], seed: int = DEFAULT_SEED) -> dict:
    """AUROC of ``scores`` as a needs-retrieval score, with a bootstrap interval over questions (the interval dict
    of ``evaluation.statistics.intervals``); unlabelled or unscored questions are left out; ``none`` without both
    classes."""
    x, y = _known(scores, labels)
    if not len(x):
        return interval(None, None, 0, "none")
    y = (y > 0).astype(float)
    if y.min() == y.max():
        return interval(None, None, len(x), "none")
    point = float(auroc_rows(x, y))
    if len(set(x.tolist())) == 1:
        return interval(point, [point, point], len(x), "constant")
    bounds, method = bootstrap_interval([x, y], auroc_rows, seed)
    return interval(point, bounds, len(x), method)


def _placements(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's structural components: per positive, the share of negatives it outscores (ties half); per
    negative, the share of positives that outscore it."""
    pos, neg = scores[positive], scores[~positive]
    psi = (pos[:, None] > neg[None, :]).astype(float) + 0.5 * (pos[:, None] == neg[None, :])
    return psi.mean(axis=1), psi.mean(axis=0)


def delong_test(scores_a: np.ndarray, scores_b: np.ndarray, labels: np.ndarray) -> dict:
    """DeLong's paired test of AUROC(a) = AUROC(b): ``{"difference", "se", "z", "p_value"}`` (p 1.0 when the
    difference has no variance, e.g. identical scores)."""
    from scipy.stats import norm

    positive = np.asarray(labels, dtype=float) > 0
    m, n = int(positive.sum()), int((~positive).sum())
    if m < 2 or n < 2:
        raise ValueError(f"DeLong's test needs at least 2 questions of each class, got {m} and {n}.")
    v10_a, v01_a = _placements(np.asarray(scores_a, dtype=float), positive)
    v10_b, v01_b = _placements(np.asarray(scores_b, dtype=float), positive)
    difference = float(v10_a.mean() - v10_b.mean())
    s10 = np.cov(np.vstack([v10_a, v10_b]))
    s01 = np.cov(np.vstack([v01_a, v01_b]))
    variance = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / m + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / n
    if not variance > 1e-15:
        return {"difference": difference, "se": 0.0, "z": None, "p_value": 1.0}
    se = math.sqrt(variance)
    z = difference / se
    return {"difference": difference, "se": se, "z": z, "p_value": float(min(1.0, 2 * norm.sf(abs(z))))}


def _difference_rows(a: np.ndarray, b: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return auroc_rows(a, y) - auroc_rows(b, y)


def auroc_difference(scores_a: Sequence[float | None], scores_b: Sequence[float | None],
                     labels: Sequence[bool | None], seed: int = DEFAULT_SEED) -> dict:
    """AUROC(a) - AUROC(b) on the questions where both scores and the label are known: ``{"difference": interval
    dict (bootstrap over questions), "auroc_a", "auroc_b", "n", "p_value" (DeLong), "se", "test": "delong"}``."""
    a, b, y = _known(scores_a, scores_b, labels)
    y = (y > 0).astype(float)
    if len(y) < 4 or y.min() == y.max():
        raise ValueError(f"An AUROC difference needs labelled questions of both classes; got {len(y)} questions "
                         f"with {int(y.sum())} needing retrieval.")
    test = delong_test(a, b, y)
    point = test["difference"]
    if test["se"] == 0.0:
        ci = interval(point, [point, point], len(y), "constant")
    else:
        bounds, method = bootstrap_interval([a, b, y], _difference_rows, seed)
        ci = interval(point, bounds, len(y), method)
    return {"difference": ci, "auroc_a": float(auroc_rows(a, y)), "auroc_b": float(auroc_rows(b, y)),
            "n": len(y), "p_value": test["p_value"], "se": test["se"], "test": "delong"}


__all__ = ["auroc_difference", "auroc_interval", "auroc_rows", "delong_test"]
