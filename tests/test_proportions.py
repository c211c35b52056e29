"""The Wilson interval and the exact McNemar test against scipy's implementations and values worked by hand."""

import math

import pytest
from scipy.stats import binomtest

from icr2_components.evaluation.statistics.proportions import (
    exact_mcnemar,
    paired_outcomes,
    wilson_interval,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("successes,n", [(0, 1), (1, 1), (0, 20), (5, 40), (12, 30), (16, 40), (39, 40), (50, 50),
                                         (3, 1000)])
def test_wilson_interval_equals_scipy(successes, n):
    expected = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_interval(successes, n)
    assert (low, high) == pytest.approx((expected.low, expected.high), abs=1e-12)
    assert 0.0 <= low <= successes / n <= high <= 1.0


def test_wilson_interval_by_hand_and_at_other_levels():
    # 0 of n: the lower bound is exactly 0 and the upper z^2 / (n + z^2)
    z = 1.959963984540054
    assert wilson_interval(0, 20) == (0.0, pytest.approx(z * z / (20 + z * z)))
    assert wilson_interval(20, 20) == (pytest.approx(20 / (20 + z * z)), 1.0)
    # symmetric about 1/2 at successes = n/2, and a higher confidence gives a wider interval
    low, high = wilson_interval(10, 20)
    assert low + high == pytest.approx(1.0)
    wide, narrow = wilson_interval(10, 20, confidence=0.99), wilson_interval(10, 20, confidence=0.8)
    assert wide[0] < low < narrow[0] and narrow[1] < high < wide[1]
    expected = binomtest(7, 25).proportion_ci(confidence_level=0.9, method="wilson")
    assert wilson_interval(7, 25, confidence=0.9) == pytest.approx((expected.low, expected.high), abs=1e-12)


@pytest.mark.parametrize("successes,n,confidence,message", [
    (1, 0, 0.95, "n >= 1"), (3, 2, 0.95, "cannot exceed"), (-1, 2, 0.95, "non-negative integer"),
    (1.5, 2, 0.95, "non-negative integer"), (True, 2, 0.95, "non-negative integer"), (1, 2, 1.0, "confidence"),
    (1, 2, 0.0, "confidence"),
])
def test_wilson_interval_refuses_bad_arguments(successes, n, confidence, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(successes, n, confidence)


@pytest.mark.parametrize("only_a,only_b", [(0, 1), (0, 10), (1, 9), (3, 3), (2, 7), (11, 0), (8, 20), (40, 25)])
def test_exact_mcnemar_equals_scipy_two_sided_binomial_test(only_a, only_b):
    expected = binomtest(only_a, only_a + only_b, 0.5, alternative="two-sided").pvalue
    assert exact_mcnemar(only_a, only_b) == pytest.approx(expected, rel=1e-12)


def test_exact_mcnemar_by_hand():
    assert exact_mcnemar(0, 0) == 1.0  # no discordant pair: no evidence either way
    assert exact_mcnemar(0, 10) == 2 / 2**10  # all ten discordant pairs one way: 2 * (1/2)^10
    assert exact_mcnemar(11, 0) == 2 / 2**11
    assert exact_mcnemar(1, 9) == pytest.approx(2 * (1 + 10) / 2**10)
    assert exact_mcnemar(3, 3) == 1.0 and exact_mcnemar(4, 5) == 1.0  # capped at 1
    assert exact_mcnemar(5, 2) == exact_mcnemar(2, 5)
    with pytest.raises(ValueError, match="only_b"):
        exact_mcnemar(1, -2)


def test_paired_outcomes_counts_each_kind_of_pair():
    a = [True, True, False, True, False, True, True]
    b = [True, False, False, False, True, False, False]
    outcome = paired_outcomes(a, b)
    assert outcome == {"n": 7, "both": 1, "only_a": 4, "only_b": 1, "neither": 1,
                       "p_value": exact_mcnemar(4, 1)}
    assert outcome["p_value"] == pytest.approx(2 * (1 + 5) / 2**5)
    # swapping the systems swaps the discordant counts, not the p-value
    swapped = paired_outcomes(b, a)
    assert (swapped["only_a"], swapped["only_b"], swapped["p_value"]) == (1, 4, outcome["p_value"])
    assert paired_outcomes([], []) == {"n": 0, "both": 0, "only_a": 0, "only_b": 0, "neither": 0, "p_value": 1.0}
    with pytest.raises(ValueError, match="one result per question"):
        paired_outcomes([True], [True, False])
    assert math.isclose(paired_outcomes([1, 0], [0, 0])["p_value"], 1.0)
