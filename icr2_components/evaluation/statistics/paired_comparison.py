"""Paired comparisons on the same questions: the difference with its interval, an exact test, Holm, the MDE.

Usage:
    >>> from icr2_components.evaluation.statistics.paired_comparison import compare_paired, holm
    >>> from icr2_components.evaluation.statistics.paired_comparison import minimum_detectable_difference
    >>> vanilla = [1, 0, 0, 1, 0, 0, 1, 0]               # answer match per question
    >>> reranked = [1, 1, 0, 1, 1, 0, 1, 1]              # the same questions, in the same order
    >>> result = compare_paired(reranked, vanilla, seed=0)
    >>> result["difference"]["mean"], result["test"], result["p_value"]    # 3 discordant pairs, all one way
    (0.375, 'exact McNemar', 0.25)
    >>> holm([0.01, 0.04, 0.03])                         # adjusted across the pipelines compared with a baseline
    [0.03, 0.06, 0.06]
    >>> round(minimum_detectable_difference(200, 0.1 ** 0.5), 4)        # n = 200, 10% discordant pairs
    0.0626

What each number is:

- **difference**: mean over the questions both systems answered of (pipeline - baseline), with its paired
  bootstrap interval (``intervals.bootstrap_interval``: both columns resampled by question, BCa). Where the
  differences do not vary there is nothing to resample: 0/1 scores get the conservative
  ``[lo(p10) - hi(p01), hi(p10) - lo(p01)]`` from the Wilson intervals (97.5% each) of the two discordant rates
  (``wilson-bonferroni``); other scores ``[d, d]`` (``constant``).
- **test**: for 0/1 scores the exact McNemar test (``scipy.stats.binomtest`` on the discordant pairs, two-sided);
  for other scores the paired sign-flip permutation test of the mean difference (``scipy.stats.permutation_test``,
  ``permutation_type="samples"``, ``PERMUTATION_RESAMPLES`` seeded random sign patterns; exact when
  2^n <= that number).
- **Holm**: ``statsmodels.stats.multitest.multipletests(method="holm")`` over a family of p-values; the report's
  family is every pipeline compared with the baseline, for one metric and one context type.
- **MDE** (minimum detectable difference): the true mean difference that a two-sided test at level ``alpha``
  would detect with probability ``power`` at this n, by the normal approximation of the paired test:
  ``MDE = (z_{1 - alpha/2} + z_{power}) * sd / sqrt(n)``, where ``sd`` is the standard deviation of the per-question
  difference under the null: for 0/1 scores ``sqrt(discordant pairs / n)`` (Connor 1987's McNemar sample size
  formula, with its ``delta^2`` term dropped), otherwise the observed standard deviation of the differences. The
  report uses ``alpha = 0.05 / m`` (m: the pipelines in the Holm family; Holm's strictest step, so a difference of
  this size is detectable whatever the other p-values) and ``power = 0.8``. With no discordant pair (or no
  variation) there is no estimate of the spread and no MDE (None).
- **verdict**: "better" / "worse" (for costs, latency and prompt tokens: "higher" / "lower") when the
  Holm-adjusted p-value is below 0.05, else "no detectable difference at n = N (could detect >= MDE)".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from icr2_components.evaluation.statistics.intervals import (
    CONFIDENCE,
    DEFAULT_SEED,
    all_equal,
    bootstrap_interval,
    interval,
    is_binary,
)
from icr2_components.evaluation.statistics.proportions import paired_outcomes, wilson_interval

ALPHA = 0.05
POWER = 0.8
PERMUTATION_RESAMPLES = 4999
MCNEMAR = "exact McNemar"
SIGN_FLIP = "sign-flip permutation"


def _difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int = DEFAULT_SEED,
                      confidence: float = CONFIDENCE) -> dict:
    """The interval dict (``intervals.interval``) of ``mean(a - b)`` over questions; ``a[i]``, ``b[i]``: question i."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"A paired difference needs one value per question from each system; got {len(a)} and "
                         f"{len(b)}.")
    n = len(x)
    if n == 0:
        return interval(None, None, 0, "none")
    differences = x - y
    mean = float(np.mean(differences))
    if all_equal(differences):
        if is_binary(x) and is_binary(y):
            per_rate = 1 - (1 - confidence) / 2
            only_a = int(np.sum((x == 1) & (y == 0)))
            only_b = int(np.sum((x == 0) & (y == 1)))
            a_low, a_high = wilson_interval(only_a, n, per_rate)
            b_low, b_high = wilson_interval(only_b, n, per_rate)
            return interval(mean, [a_low - b_high, a_high - b_low], n, "wilson-bonferroni")
        if n == 1:
            return interval(mean, None, 1, "single value")
        return interval(mean, [mean, mean], n, "constant")
    bounds, method = bootstrap_interval([x, y], _difference, seed, confidence)
    return interval(mean, bounds, n, method)


def sign_flip_test(a: Sequence[float], b: Sequence[float], seed: int = DEFAULT_SEED,
                   resamples: int = PERMUTATION_RESAMPLES) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of ``mean(a - b) = 0`` (1.0 when every
    difference is 0, or for a single question)."""
    from scipy.stats import permutation_test

    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not np.any(differences) or len(differences) < 2:
        return 1.0  # one question: its two sign patterns are equally extreme, the exact p-value is 1
    result = permutation_test((differences,), lambda d, axis=-1: np.mean(d, axis=axis), permutation_type="samples",
                              vectorized=True, n_resamples=resamples, rng=np.random.default_rng(seed))
    return min(1.0, float(result.pvalue))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[float]:
    """Holm-adjusted p-values (``statsmodels.stats.multitest.multipletests(method="holm")``), in the given order."""
    if not p_values:
        return []
    import gc

    from statsmodels.stats.multitest import multipletests

    # statsmodels' Holm branch ends with gc.collect(), a full collection on every call (about 0.5-0.8 s once torch
    # and ragas are loaded, and a report makes one call per metric and context type): frozen objects are skipped,
    # so only those made since are collected
    gc.freeze()
    try:
        adjusted = multipletests(list(p_values), alpha=alpha, method="holm")[1]
    finally:
        gc.unfreeze()
    return [float(p) for p in adjusted]


def minimum_detectable_difference(n: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """``(z_{1 - alpha/2} + z_{power}) * sd / sqrt(n)`` (module docstring); None when ``sd`` is 0 or n < 2."""
    from scipy.stats import norm

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be between 0 and 1, got {alpha!r} and {power!r}.")
    if n < 2 or not sd > 0:
        return None
    return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * sd / math.sqrt(n))


def compare_paired(a: Sequence[float], b: Sequence[float], seed: int = DEFAULT_SEED, mde_alpha: float = ALPHA,
                   power: float = POWER) -> dict:
    """One paired comparison of system A (``a``) with the baseline B (``b``) on the same questions: ``difference``
    (interval dict), ``test``, ``p_value`` (unadjusted), ``mde`` (at ``mde_alpha``, ``power``) and, for 0/1
    scores, the discordant counts ``only_pipeline`` / ``only_baseline`` (and ``both``, ``neither``)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    result: dict = {"difference": paired_difference(x, y, seed)}
    n = len(x)
    if is_binary(x) and is_binary(y):
        outcome = paired_outcomes([v == 1 for v in x], [v == 1 for v in y])
        result.update(test=MCNEMAR, p_value=float(outcome["p_value"]), both=outcome["both"],
                      only_pipeline=outcome["only_a"], only_baseline=outcome["only_b"], neither=outcome["neither"])
        sd = math.sqrt((outcome["only_a"] + outcome["only_b"]) / n) if n else 0.0
    else:
        result.update(test=SIGN_FLIP, p_value=sign_flip_test(x, y, seed))
        sd = float(np.std(x - y, ddof=1)) if n > 1 else 0.0
    result["mde"] = minimum_detectable_difference(n, sd, mde_alpha, power)
    return result


def format_amount(value: float) -> str:
    """A difference as a verdict states it: two decimals below 10, whole numbers above."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2f}"


def verdict(difference: float | None, p_holm: float | None, n: int, mde: float | None, higher_is_better: bool = True,
            alpha: float = ALPHA, largest: float | None = None) -> str:
    """"better"/"worse" (or "higher"/"lower" for a cost, ``higher_is_better=False``) when ``p_holm < alpha``; else
    "no detectable difference at n = N (could detect >= MDE)", or, where the MDE reaches ``largest`` (the largest
    possible difference, 1 for a score in [0, 1]), "(too few questions to detect any difference)"."""
    if difference is None or p_holm is None:
        return "no paired answers"
    if p_holm < alpha and difference != 0:
        if higher_is_better:
            return "better" if difference > 0 else "worse"
        return "higher" if difference > 0 else "lower"
    if mde is None:
        return f"no detectable difference at n = {n} (no question differs)"
    if largest is not None and mde >= largest:
        return f"no detectable difference at n = {n} (too few questions to detect any difference)"
    return f"no detectable difference at n = {n} (could detect ≥ {format_amount(mde)})"


def gap_closed(pipeline: Sequence[float], baseline: Sequence[float], oracle: Sequence[float],
               seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> dict:
    """How much of the baseline -> oracle gap the pipeline closes on the same questions:
    ``(mean(pipeline) - mean(baseline)) / (mean(oracle) - mean(baseline))``, with a percentile bootstrap interval
    (the three columns resampled by question; BCa is unreliable for a ratio whose denominator can approach 0).
    Undefined (``mean`` None) when the oracle is not better than the baseline on these questions; the interval is
    None when in more than ``(1 - confidence) / 2`` of the resamples it is not (``undefined_resamples`` says how
    many)."""
    from scipy.stats import bootstrap

    p, b, o = (np.asarray(c, dtype=float) for c in (pipeline, baseline, oracle))
    if not p.shape == b.shape == o.shape or p.ndim != 1:
        raise ValueError("gap_closed needs one value per question from each of the three systems.")
    n = len(p)
    result = {"mean": None, "ci95": None, "n": n, "method": "bootstrap-percentile", "undefined_resamples": None}
    gap = float(np.mean(o) - np.mean(b)) if n else 0.0
    if gap <= 0:
        result["method"] = "undefined: the oracle is not better than the baseline on these questions"
        return result
    result["mean"] = float((np.mean(p) - np.mean(b)) / gap)
    if n < 2:
        return result

    def ratio(x, y, z, axis=-1):
        denominator = np.mean(z, axis=axis) - np.mean(y, axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denominator > 0, (np.mean(x, axis=axis) - np.mean(y, axis=axis)) / denominator, np.nan)

    with warnings.catch_warnings():  # scipy warns when a resample's ratio is NaN; counted below instead
        warnings.simplefilter("ignore")
        res = bootstrap((p, b, o), ratio, paired=True, vectorized=True, method="percentile",
                        rng=np.random.default_rng(seed), confidence_level=confidence)
    distribution = np.asarray(res.bootstrap_distribution, dtype=float)
    undefined = int(np.isnan(distribution).sum())
    result["undefined_resamples"] = undefined
    tail = (1 - confidence) / 2
    if undefined > tail * len(distribution):
        result["method"] = "bootstrap-percentile: undefined (the oracle was not better in too many resamples)"
        return result
    low, high = np.percentile(distribution[~np.isnan(distribution)], [tail * 100, 100 - tail * 100])
    result["ci95"] = [float(low), float(high)]
    return result


__all__ = ["ALPHA", "MCNEMAR", "PERMUTATION_RESAMPLES", "POWER", "SIGN_FLIP", "compare_paired", "format_amount",
           "gap_closed", "holm", "minimum_detectable_difference", "paired_difference", "sign_flip_test", "verdict"]
