"""Per-pipeline 95% intervals: values worked by hand, the library calls they are, the degenerate samples said as
such, and coverage of the true mean on simulated data at about the nominal rate (seeded, a few seconds)."""

import numpy as np
import pytest
from scipy.stats import bootstrap
from statsmodels.stats.proportion import proportion_confint

from icr2_components.evaluation.statistics.intervals import (
    BOOTSTRAP_RESAMPLES,
    format_interval,
    mean_interval,
    mean_of_means_interval,
)

pytestmark = pytest.mark.unit

Z95 = 1.959963984540054


def test_zero_one_scores_get_the_wilson_interval():
    # 12 of 30 right: the Wilson interval, by statsmodels and by the formula
    # centre = (p + z^2/2n) / (1 + z^2/n), half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
    result = mean_interval([1] * 12 + [0] * 18)
    p, n = 0.4, 30
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * (p * (1 - p) / n + Z95**2 / (4 * n * n)) ** 0.5 / (1 + Z95**2 / n)
    assert result == {"mean": pytest.approx(0.4), "ci95": [pytest.approx(centre - half), pytest.approx(centre + half)],
                      "n": 30, "method": "wilson"}
    assert result["ci95"] == pytest.approx(list(proportion_confint(12, 30, method="wilson")))
    assert result["ci95"] == pytest.approx([0.2459, 0.5768], abs=1e-4)
    # all right: no spread to bootstrap, but Wilson still bounds the rate: [n / (n + z^2), 1]
    assert mean_interval([1, 1, 1]) == {"mean": 1.0, "ci95": [pytest.approx(3 / (3 + Z95**2)), 1.0], "n": 3,
                                        "method": "wilson"}
    assert mean_interval([0.0] * 5)["ci95"] == [0.0, pytest.approx(Z95**2 / (5 + Z95**2))]
    assert mean_interval([None, 1, None, 0])["n"] == 2  # None is no value, not a zero


def test_degenerate_samples_are_named():
    assert mean_interval([]) == {"mean": None, "ci95": None, "n": 0, "method": "none"}
    assert mean_interval([None]) == {"mean": None, "ci95": None, "n": 0, "method": "none"}
    assert mean_interval([0.42]) == {"mean": 0.42, "ci95": None, "n": 1, "method": "single value"}
    assert mean_interval([0.5, 0.5, 0.5]) == {"mean": 0.5, "ci95": [0.5, 0.5], "n": 3, "method": "constant"}
    assert format_interval(mean_interval([0.42])) == "0.420 [n=1]"
    assert format_interval(mean_interval([])) == "-"


def test_other_scores_get_scipys_bca_bootstrap_with_the_given_seed():
    values = [0.0, 0.2, 0.25, 0.5, 0.5, 0.8, 1.0, 0.4, 0.0, 0.3]
    result = mean_interval(values, seed=7)
    expected = bootstrap((np.asarray(values),), np.mean, method="BCa", n_resamples=BOOTSTRAP_RESAMPLES,
                         rng=np.random.default_rng(7)).confidence_interval
    assert result["method"] == "bootstrap-bca" and result["n"] == 10
    assert result["ci95"] == pytest.approx([expected.low, expected.high])
    assert result["ci95"][0] < np.mean(values) < result["ci95"][1]
    assert mean_interval(values, seed=7) == result  # seeded: the same interval again
    assert mean_interval(values, seed=8)["ci95"] != result["ci95"]
    assert format_interval(result) == f"0.395 [{result['ci95'][0]:.2f}, {result['ci95'][1]:.2f}]"
    assert format_interval(mean_interval([1.5, 2.5, 4.0]), 2, 2).startswith("2.67 [")  # latency-style decimals


def test_bootstrap_interval_covers_the_true_mean_at_about_the_nominal_rate():
    """200 simulated samples of 40 answers from a skewed score distribution (Beta(0.5, 2), mean 0.2): the BCa
    interval covers the true mean in 90-99% of them (nominal 95%; a bootstrap is a little narrow at small n)."""
    rng = np.random.default_rng(2024)
    covered = 0
    for trial in range(200):
        sample = rng.beta(0.5, 2.0, size=40)
        low, high = mean_interval(list(sample), seed=trial)["ci95"]
        covered += low <= 0.2 <= high
    assert 0.90 <= covered / 200 <= 0.99, covered


def test_wilson_interval_covers_the_true_rate_at_about_the_nominal_rate():
    """200 simulated samples of 50 Bernoulli(0.3) answers: the Wilson interval covers 0.3 in 90-99% of them."""
    rng = np.random.default_rng(15)
    covered = 0
    for _ in range(200):
        result = mean_interval(list((rng.random(50) < 0.3).astype(float)))
        assert result["method"] == "wilson"
        covered += result["ci95"][0] <= 0.3 <= result["ci95"][1]
    assert 0.90 <= covered / 200 <= 0.99, covered


def test_faithfulness_resamples_questions_jointly_over_both_context_types():
    gold = [1, 1, 0, 1, 1, 0, 1, 1]
    conflicting = [0, 1, 0, 0, 1, 0, 0, 1]
    result = mean_of_means_interval([gold, conflicting], seed=3)
    assert result["mean"] == pytest.approx((6 / 8 + 3 / 8) / 2) and result["n"] == 8
    # the same as scipy's paired bootstrap of the statistic over both columns (questions kept together)
    expected = bootstrap((np.asarray(gold, float), np.asarray(conflicting, float)),
                         lambda g, c, axis=-1: (np.mean(g, axis=axis) + np.mean(c, axis=axis)) / 2, paired=True,
                         method="BCa", n_resamples=BOOTSTRAP_RESAMPLES,
                         rng=np.random.default_rng(3)).confidence_interval
    assert result["method"] == "bootstrap-bca"
    assert result["ci95"] == pytest.approx([expected.low, expected.high])
    # a question without a conflicting answer (NaN) counts in gold only; the percentile interval is used when the
    # jackknife (BCa's acceleration) meets a column without a value
    partial = mean_of_means_interval([[1, 0, 1, 1], [0, 1, 0, float("nan")]], seed=0)
    assert partial["mean"] == pytest.approx((3 / 4 + 1 / 3) / 2) and partial["n"] == 4
    assert partial["method"] in ("bootstrap-bca", "bootstrap-percentile")
    assert 0 <= partial["ci95"][0] <= partial["mean"] <= partial["ci95"][1] <= 1


def test_faithfulness_without_spread_uses_bonferroni_wilson_bounds():
    # every answer faithful: each column's Wilson interval at 97.5% (z = 2.2414), averaged
    z = 2.241402727604947
    result = mean_of_means_interval([[1, 1, 1, 1], [1, 1, 1, float("nan")]])
    assert result["method"] == "wilson-bonferroni" and result["mean"] == 1.0 and result["n"] == 4
    assert result["ci95"] == [pytest.approx((4 / (4 + z * z) + 3 / (3 + z * z)) / 2), 1.0]
    assert mean_of_means_interval([[float("nan")] * 2, [1, 0]])["method"] == "none"
    with pytest.raises(ValueError, match="one common length"):
        mean_of_means_interval([[1, 0], [1]])
