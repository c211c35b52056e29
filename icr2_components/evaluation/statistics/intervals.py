"""95% intervals of per-question means: Wilson for 0/1 scores, a seeded BCa bootstrap over questions otherwise.

Usage:
    >>> from icr2_components.evaluation.statistics.intervals import mean_interval, mean_of_means_interval
    >>> mean_interval([1, 0, 1, 1, 0])                      # 0/1 scores (answer match): Wilson
    {'mean': 0.6, 'ci95': [0.2307..., 0.8823...], 'n': 5, 'method': 'wilson'}
    >>> mean_interval([0.2, 0.5, 0.9, 0.4, 0.7], seed=0)["method"]   # token F1, latency...: bootstrap
    'bootstrap-bca'
    >>> gold, conflicting = [1, 1, 0, 1], [0, 1, 0, float("nan")]   # BCU per question; NaN: no answer
    >>> mean_of_means_interval([gold, conflicting], seed=0)["mean"]  # CUB faithfulness: both resampled together
    0.5416...

Every interval is a dict ``{"mean", "ci95": [low, high] or None, "n", "method"}``, ``n`` the number of questions
(values) behind it, ``method`` one of ``METHODS``. The choice, explicitly:

- **Wilson** (``statsmodels.stats.proportion.proportion_confint(method="wilson")``, via ``proportions``) when
  every value is 0 or 1: the score interval keeps its coverage for small n and rates near 0 or 1, where a
  bootstrap collapses to a point (30 answers out of 30 right has no spread to resample).
- **BCa bootstrap over questions** otherwise (``scipy.stats.bootstrap``, ``method="BCa"``, ``BOOTSTRAP_RESAMPLES``
  resamples, ``numpy.random.default_rng(seed)``): the bias-corrected and accelerated percentile interval is
  second-order accurate and follows the skew of bounded scores (F1 near 0) and of latencies, which the plain
  percentile interval does not. Where BCa is undefined (scipy returns NaN: e.g. too few distinct values for its
  jackknife acceleration) the percentile interval of the same resamples is given, as ``bootstrap-percentile``.
- **Degenerate samples**, said as such: no value -> ``mean`` and ``ci95`` None (``"none"``); one value that is
  not 0/1 -> ``ci95`` None (``"single value"``: one question says nothing about the spread); all values equal
  and not all 0/1 -> ``[v, v]`` (``"constant"``: no spread among these questions, which is all a bootstrap can
  know).

Like any bootstrap of a mean, the intervals are a little narrow for small n (the resampled variance is
(n-1)/n of the sample's); Wilson does not have that problem. The same seed gives the same resampled questions
for samples of the same size, so a report is reproducible; the seed is recorded in the report.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from icr2_components.evaluation.statistics.proportions import wilson_interval

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999
DEFAULT_SEED = 0
METHODS = {
    "wilson": "Wilson score interval (every value 0 or 1)",
    "bootstrap-bca": "BCa bootstrap over questions (scipy.stats.bootstrap)",
    "bootstrap-percentile": "percentile bootstrap over questions (BCa undefined for this sample)",
    "wilson-bonferroni": "mean of per-column Wilson bounds at 97.5% each (0/1 values with no spread to resample)",
    "constant": "all values equal: no spread among these questions",
    "single value": "one value (or one in a column of a joint statistic): no interval",
    "none": "no value",
}


def interval(mean: float | None, ci95: Sequence[float] | None, n: int, method: str) -> dict:
    """The interval dict every report section uses."""
    if method not in METHODS:
        raise ValueError(f"Unknown interval method {method!r}; one of {sorted(METHODS)}.")
    return {"mean": None if mean is None else float(mean),
            "ci95": None if ci95 is None else [float(ci95[0]), float(ci95[1])], "n": int(n), "method": method}


def is_binary(values: np.ndarray) -> bool:
    """True when every (non-NaN) value is 0 or 1."""
    known = values[~np.isnan(values)]
    return bool(np.all((known == 0) | (known == 1)))


def all_equal(values: np.ndarray) -> bool:
    """True when every value equals the first, up to floating-point rounding (0.3 - 0.1 and 0.5 - 0.3 are equal)."""
    return bool(np.allclose(values, values[0], rtol=1e-12, atol=1e-12)) if len(values) else True


def _as_array(values: Sequence[float | None]) -> np.ndarray:
    """A float array of the known values (None left out)."""
    return np.asarray([v for v in values if v is not None], dtype=float)


def bootstrap_interval(columns: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], seed: int = DEFAULT_SEED,
                       confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES
                       ) -> tuple[list[float], str]:
    """``[low, high]`` and the method of the bootstrap interval of ``statistic`` over questions: the ``columns``
    (one value per question each, same length) are resampled together (``paired=True``), so a statistic of
    several columns keeps each question's values together. ``statistic(*columns, axis=-1)`` must be vectorised.
    BCa first; the percentile interval when BCa is undefined; NaN in a resample's statistic (a resample with no
    known value in a column) is left out of the percentile interval."""
    from scipy.stats import bootstrap

    arrays = [np.asarray(c, dtype=float) for c in columns]
    if len({len(a) for a in arrays}) != 1 or len(arrays[0]) < 2:
        raise ValueError("bootstrap_interval needs columns of one common length >= 2 (one value per question).")
    settings = dict(statistic=statistic, paired=True, vectorized=True, n_resamples=resamples,
                    confidence_level=confidence)
    with warnings.catch_warnings():
        # scipy warns where BCa is undefined (and returns NaN); that case is handled below, by name
        warnings.simplefilter("ignore")
        result = bootstrap(arrays, method="BCa", rng=np.random.default_rng(seed), **settings)
        low, high = result.confidence_interval
        if not (math.isnan(low) or math.isnan(high)):
            return [float(low), float(high)], "bootstrap-bca"
        distribution = np.asarray(result.bootstrap_distribution, dtype=float)
    distribution = distribution[~np.isnan(distribution)]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(distribution, [tail, 100 - tail])
    return [float(low), float(high)], "bootstrap-percentile"


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def mean_interval(values: Sequence[float | None], seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> dict:
    """The mean of the known values (None left out) and its interval (module docstring: which and why)."""
    data = _as_array(values)
    n = len(data)
    if n == 0:
        return interval(None, None, 0, "none")
    mean = float(np.mean(data))
    if is_binary(data):
        return interval(mean, wilson_interval(int(data.sum()), n, confidence), n, "wilson")
    if n == 1:
        return interval(mean, None, 1, "single value")
    if all_equal(data):
        return interval(mean, [mean, mean], n, "constant")
    bounds, method = bootstrap_interval([data], _mean, seed, confidence)
    return interval(mean, bounds, n, method)


def _mean_of_column_means(*columns: np.ndarray, axis: int = -1) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with no value in a column: NaN, left out
        return np.mean([np.nanmean(c, axis=axis) for c in columns], axis=0)


def mean_of_means_interval(columns: Sequence[Sequence[float]], seed: int = DEFAULT_SEED,
                           confidence: float = CONFIDENCE) -> dict:
    """The mean of the columns' means (each column: one value per question, NaN where that question has none,
    e.g. CUB faithfulness = mean(BCU gold, BCU conflicting)) with its interval: the questions are resampled
    jointly, so a question's values in the columns stay together. ``n``: questions with a value in some column.
    Where no column varies and all values are 0/1 there is nothing to resample: each column's Wilson interval at
    1 - (1 - confidence)/2 (Bonferroni), averaged (``wilson-bonferroni``, conservative)."""
    arrays = [np.asarray(c, dtype=float) for c in columns]
    if not arrays or len({len(a) for a in arrays}) != 1:
        raise ValueError("mean_of_means_interval needs columns of one common length (one value per question).")
    if any(np.all(np.isnan(a)) for a in arrays):
        return interval(None, None, 0, "none")
    known_rows = ~np.all(np.isnan(np.vstack(arrays)), axis=0)
    arrays = [a[known_rows] for a in arrays]
    n = int(known_rows.sum())
    mean = float(np.mean([np.nanmean(a) for a in arrays]))
    constant = all(all_equal(a[~np.isnan(a)]) for a in arrays)
    if constant and all(is_binary(a) for a in arrays):
        per_column = 1 - (1 - confidence) / 2
        bounds = [wilson_interval(int(np.nansum(a)), int((~np.isnan(a)).sum()), per_column) for a in arrays]
        return interval(mean, [float(np.mean([b[0] for b in bounds])), float(np.mean([b[1] for b in bounds]))], n,
                        "wilson-bonferroni")
    if min(int((~np.isnan(a)).sum()) for a in arrays) == 1:
        return interval(mean, None, n, "single value")  # a column's mean rests on one question
    if constant:
        return interval(mean, [mean, mean], n, "constant")
    bounds, method = bootstrap_interval(arrays, _mean_of_column_means, seed, confidence)
    return interval(mean, bounds, n, method)


def format_interval(value: dict | None, mean_decimals: int = 3, bound_decimals: int = 2) -> str:
    """``"0.875 [0.53, 0.98]"``: the mean, then its interval; ``"0.500 [n=1]"`` without one; ``-`` for no value."""
    if not value or value.get("mean") is None:
        return "-"
    mean = f"{value['mean']:.{mean_decimals}f}"
    if value.get("ci95") is None:
        return f"{mean} [n={value['n']}]"
    low, high = value["ci95"]
    return f"{mean} [{low:.{bound_decimals}f}, {high:.{bound_decimals}f}]"


__all__ = ["BOOTSTRAP_RESAMPLES", "CONFIDENCE", "DEFAULT_SEED", "METHODS", "all_equal", "bootstrap_interval",
           "format_interval", "interval", "is_binary", "mean_interval", "mean_of_means_interval"]
