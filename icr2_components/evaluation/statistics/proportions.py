"""Small statistics for 0/1 scores such as answer match: a Wilson interval and an exact paired McNemar test.

Usage:
    >>> from icr2_components.evaluation.statistics.proportions import wilson_interval, paired_outcomes
    >>> wilson_interval(12, 30)                      # 12 answers of 30 match: the 95% interval of the rate
    (0.2459..., 0.5768...)
    >>> paired_outcomes([True, True, False], [False, True, False])["p_value"]   # same questions, two systems
    1.0

The Wilson score interval (Wilson 1927) keeps its coverage near 95% for small n and rates near 0 or 1, where the
normal-approximation interval collapses to a point; McNemar's test compares two systems on the same questions
using only the questions where exactly one of them is right (the discordant pairs), exactly: under the null both
kinds of discordant pair are equally likely, so their split is Binomial(b + c, 1/2). Both are library calls
(``statsmodels.stats.proportion.proportion_confint(method="wilson")`` and ``scipy.stats.binomtest``); this module
checks the arguments and names the results. ``intervals`` and ``paired_comparison`` build on it.
"""

from __future__ import annotations

from collections.abc import Sequence


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the success rate ``successes / n`` at ``confidence`` (two-sided)."""
    _check_count("successes", successes)
    _check_count("n", n)
    if n == 0:
        raise ValueError("wilson_interval needs n >= 1 (no trial, no interval).")
    if successes > n:
        raise ValueError(f"successes ({successes}) cannot exceed n ({n}).")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}.")
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    # the bounds are exactly 0 and 1 at 0/n and n/n; clamp the rounding
    low = 0.0 if successes == 0 else max(0.0, float(low))
    high = 1.0 if successes == n else min(1.0, float(high))
    return low, high


def exact_mcnemar(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: ``only_a`` questions where only system A is right,
    ``only_b`` where only B is. ``P = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``; 1.0 when
    there is no discordant pair."""
    _check_count("only_a", only_a)
    _check_count("only_b", only_b)
    total = only_a + only_b
    if total == 0:
        return 1.0
    from scipy.stats import binomtest

    # two-sided at p = 1/2: the distribution is symmetric, so scipy's two-sided p-value is twice the smaller tail
    return min(1.0, float(binomtest(only_a, total, 0.5, alternative="two-sided").pvalue))


def paired_outcomes(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float | int]:
    """Paired 0/1 outcomes of two systems on the same questions (``a[i]`` and ``b[i]`` for question i):
    ``n``, ``both``, ``only_a``, ``only_b``, ``neither`` and the exact McNemar ``p_value``."""
    if len(a) != len(b):
        raise ValueError(f"Paired outcomes need one result per question from each system; got {len(a)} and {len(b)}.")
    pairs = [(bool(x), bool(y)) for x, y in zip(a, b, strict=True)]
    only_a = sum(1 for x, y in pairs if x and not y)
    only_b = sum(1 for x, y in pairs if y and not x)
    return {
        "n": len(pairs),
        "both": sum(1 for x, y in pairs if x and y),
        "only_a": only_a,
        "only_b": only_b,
        "neither": sum(1 for x, y in pairs if not x and not y),
        "p_value": exact_mcnemar(only_a, only_b),
    }
