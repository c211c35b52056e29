"""Paired comparisons against hand-worked small cases: the exact McNemar p-value, Holm, the MDE, the sign-flip
test, verdicts, the gap closed toward the oracle, and the paired bootstrap interval's coverage on simulated data."""

import math

import numpy as np
import pytest
from statsmodels.stats.power import NormalIndPower

from icr2_components.evaluation.statistics.paired_comparison import (
    MCNEMAR,
    SIGN_FLIP,
    compare_paired,
    gap_closed,
    holm,
    minimum_detectable_difference,
    paired_difference,
    sign_flip_test,
    verdict,
)

pytestmark = pytest.mark.unit

Z975, Z80 = 1.959963984540054, 0.8416212335729143


def paired_answers(both, only_a, only_b, neither):
    a = [1] * both + [1] * only_a + [0] * only_b + [0] * neither
    b = [1] * both + [0] * only_a + [1] * only_b + [0] * neither
    return a, b


def test_exact_mcnemar_on_a_hand_worked_case():
    # 1 question only the pipeline gets right, 9 only the baseline: under the null the 10 discordant pairs split
    # as Binomial(10, 1/2); two-sided p = 2 * P(X <= 1) = 2 * (C(10,0) + C(10,1)) / 2^10 = 2 * 11 / 1024 = 0.021484375
    a, b = paired_answers(both=20, only_a=1, only_b=9, neither=10)
    result = compare_paired(a, b, seed=0)
    assert result["test"] == MCNEMAR
    assert result["p_value"] == pytest.approx(22 / 1024, rel=1e-12) and round(result["p_value"], 5) == 0.02148
    assert (result["both"], result["only_pipeline"], result["only_baseline"], result["neither"]) == (20, 1, 9, 10)
    assert result["difference"]["mean"] == pytest.approx(-8 / 40) and result["difference"]["n"] == 40
    # all 10 one way: 2 / 2^10; none discordant: 1
    assert compare_paired(*paired_answers(5, 10, 0, 5))["p_value"] == pytest.approx(2 / 1024)
    assert compare_paired(*paired_answers(5, 0, 0, 5))["p_value"] == 1.0


def test_holm_on_a_hand_worked_list():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04; running maximum -> 0.02, 0.03,
    # 0.06, 0.06; back in the given order:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])
    assert holm([0.7, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.04]) == [0.04] and holm([]) == []


def test_minimum_detectable_difference_on_a_worked_case():
    # n = 200 questions, 20 discordant pairs (rate 0.1): sd of the per-question difference under the null is
    # sqrt(0.1); MDE = (z_0.975 + z_0.8) * sqrt(0.1) / sqrt(200) = 2.80158 * 0.0223607 = 0.06265
    mde = minimum_detectable_difference(200, math.sqrt(0.1))
    assert mde == pytest.approx((Z975 + Z80) * math.sqrt(0.1 / 200)) and round(mde, 4) == 0.0626
    # the same number from statsmodels' one-sample normal power (ratio=0), in effect-size units times sd
    effect = NormalIndPower().solve_power(effect_size=None, nobs1=200, alpha=0.05, power=0.8, ratio=0)
    assert mde == pytest.approx(effect * math.sqrt(0.1), rel=1e-4)
    # Holm's strictest step over 4 pipelines, alpha = 0.0125: z_0.99375 = 2.49771
    assert minimum_detectable_difference(200, math.sqrt(0.1), alpha=0.0125) == pytest.approx(
        (2.497705 + Z80) * math.sqrt(0.1 / 200), rel=1e-5)
    assert minimum_detectable_difference(200, 0.0) is None and minimum_detectable_difference(1, 0.3) is None
    # compare_paired uses the observed discordant rate: 20 of 200
    a, b = paired_answers(both=60, only_a=12, only_b=8, neither=120)
    assert compare_paired(a, b)["mde"] == pytest.approx(mde)
    assert compare_paired(a, b, mde_alpha=0.0125)["mde"] == pytest.approx((2.497705 + Z80) * math.sqrt(0.1 / 200),
                                                                           rel=1e-5)


def test_verdicts_say_better_worse_or_what_could_have_been_detected():
    assert verdict(0.12, 0.01, 200, 0.08) == "better"
    assert verdict(-0.12, 0.01, 200, 0.08) == "worse"
    assert verdict(0.4, 0.001, 200, 0.1, higher_is_better=False) == "higher"  # latency: a cost, not a quality
    assert verdict(-0.4, 0.001, 200, 0.1, higher_is_better=False) == "lower"
    assert verdict(0.03, 0.2, 200, 0.0912) == "no detectable difference at n = 200 (could detect ≥ 0.09)"
    assert verdict(0.0, 1.0, 50, None) == "no detectable difference at n = 50 (no question differs)"
    assert verdict(0.3, 0.5, 3, 1.3, largest=1.0) == ("no detectable difference at n = 3 (too few questions to "
                                                      "detect any difference)")
    assert verdict(35.0, 0.3, 40, 120.4, higher_is_better=False) == ("no detectable difference at n = 40 "
                                                                      "(could detect ≥ 120)")


def test_sign_flip_test_is_exact_for_small_n():
    # differences 1, 2, 3: of the 2^3 sign patterns only +++ and --- reach |mean| >= 2, so p = 2/8
    assert sign_flip_test([1, 2, 3], [0, 0, 0]) == pytest.approx(0.25)
    # 0.5, -0.1, 0.3, 0.2 (sum 0.9): sign patterns on 0.5, 0.1, 0.3, 0.2 with |sum| >= 0.9 are the observed one,
    # the one with +0.1 (1.1) and their negatives: p = 4/16
    assert sign_flip_test([0.5, 0.0, 0.3, 0.2], [0.0, 0.1, 0.0, 0.0]) == pytest.approx(4 / 16)
    assert sign_flip_test([0.2, 0.4], [0.2, 0.4]) == 1.0
    assert sign_flip_test([0.7], [0.2]) == 1.0  # one question: + and - are equally extreme
    single = compare_paired([0.7], [0.2])  # (a quickstart with --compare-questions 1 reaches this)
    assert single["difference"] == {"mean": pytest.approx(0.5), "ci95": None, "n": 1, "method": "single value"}
    assert single["p_value"] == 1.0 and single["mde"] is None
    result = compare_paired([0.5, 0.0, 0.3, 0.2], [0.0, 0.1, 0.0, 0.0])
    assert result["test"] == SIGN_FLIP and "only_pipeline" not in result
    assert result["difference"]["mean"] == pytest.approx(0.225)


def test_paired_difference_without_variation_uses_wilson_bounds_of_the_discordant_rates():
    # 10 questions, no discordant pair: |difference| <= discordant rate, whose 97.5% Wilson upper bound at 0/10
    # is z^2 / (10 + z^2) with z = 2.2414
    z = 2.241402727604947
    result = paired_difference([1, 0] * 5, [1, 0] * 5)
    bound = z * z / (10 + z * z)
    assert result == {"mean": 0.0, "ci95": [pytest.approx(-bound), pytest.approx(bound)], "n": 10,
                      "method": "wilson-bonferroni"}
    assert paired_difference([0.3, 0.5], [0.1, 0.3]) == {"mean": pytest.approx(0.2), "ci95": [pytest.approx(0.2)] * 2,
                                                         "n": 2, "method": "constant"}
    with pytest.raises(ValueError, match="one value per question"):
        paired_difference([1, 0], [1])


def test_paired_bootstrap_interval_covers_the_true_difference_at_about_the_nominal_rate():
    """200 simulated pairs of systems on 40 shared questions (question difficulty shared, true difference 0.1):
    the paired bootstrap interval covers 0.1 in 90-99% of them."""
    rng = np.random.default_rng(99)
    covered = 0
    for trial in range(200):
        difficulty = rng.normal(0.5, 0.2, size=40)
        baseline = difficulty + rng.normal(0, 0.1, size=40)
        pipeline = difficulty + 0.1 + rng.normal(0, 0.1, size=40)
        low, high = paired_difference(pipeline, baseline, seed=trial)["ci95"]
        covered += low <= 0.1 <= high
    assert 0.90 <= covered / 200 <= 0.99, covered


def test_gap_closed_toward_the_oracle():
    # baseline 2/10, oracle 6/10, pipeline 4/10 on the same questions: (0.4 - 0.2) / (0.6 - 0.2) = 0.5
    baseline = [1, 1] + [0] * 8
    oracle = [1] * 6 + [0] * 4
    pipeline = [1, 0, 1, 1, 1, 0, 0, 0, 0, 0]
    result = gap_closed(pipeline, baseline, oracle, seed=0)
    assert result["mean"] == pytest.approx(0.5) and result["n"] == 10
    assert result["method"] == "bootstrap-percentile" and result["ci95"][0] <= 0.5 <= result["ci95"][1]
    assert gap_closed(pipeline, baseline, oracle, seed=0) == result
    # the oracle no better than the baseline: no gap to close
    undefined = gap_closed(pipeline, oracle, baseline)
    assert undefined["mean"] is None and undefined["method"].startswith("undefined")
