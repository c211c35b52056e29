"""Is a position curve's shape significant? The unpaired tests of compare's curves and the paired tests of a position
sweep, on hand-worked tables."""

import numpy as np
import pytest
from scipy.stats import MonteCarloMethod, fisher_exact

from icr2_components.evaluation.statistics.position_tests import (
    FISHER,
    FREEMAN_HALTON,
    paired_position_test,
    shape_verdict,
    unpaired_position_test,
)

pytestmark = pytest.mark.unit


def test_first_against_last_bucket_is_fishers_exact_test():
    # 3/3 right at position 1, 0/3 at the last non-empty bucket: of the C(6,3) = 20 tables with these margins,
    # [[3,0],[0,3]] and [[0,3],[3,0]] are each 1/20 likely and the most extreme: p = 2/20 = 0.1
    result = unpaired_position_test([("1", 3, 3), ("2-3", 0, 0), ("4-5", 0, 3), (">20", 0, 0)])
    pair = result["first_vs_last"]
    assert (pair["first"], pair["last"], pair["table"], pair["test"]) == ("1", "4-5", [[3, 0], [0, 3]], FISHER)
    assert pair["p_value"] == pytest.approx(0.1) and pair["difference"] == -1.0
    # only two non-empty buckets: "across positions" is the same 2x2 test
    assert result["across_positions"] == {"buckets": ["1", "4-5"], "test": FISHER, "p_value": pytest.approx(0.1)}
    assert shape_verdict(result) == ("first (1) vs last (4-5): no significant difference (p = 0.1); no significant "
                                     "difference across positions (p = 0.1)")


def test_across_positions_is_fisher_freeman_halton_as_scipy_computes_it():
    buckets = [("1", 18, 20), ("2-3", 9, 20), ("4-5", 8, 20)]
    result = unpaired_position_test(buckets, seed=5)
    table = np.array([[18, 2], [9, 11], [8, 12]])
    expected = fisher_exact(table, method=MonteCarloMethod(n_resamples=9999, rng=np.random.default_rng(5))).pvalue
    assert result["across_positions"]["test"] == FREEMAN_HALTON
    assert result["across_positions"]["p_value"] == pytest.approx(float(expected))
    assert result["first_vs_last"]["p_value"] == pytest.approx(fisher_exact([[18, 2], [8, 12]]).pvalue)
    assert shape_verdict(result).startswith("last (4-5) lower than first (1), p = 0.0022; positions differ")
    # a sparse table (more cells than answers), where scipy 1.17's fisher_exact returns an array: a float here
    sparse = unpaired_position_test([("1", 1, 1), ("2-3", 1, 2), ("4-5", 1, 1), ("6-10", 1, 1)])
    assert isinstance(sparse["across_positions"]["p_value"], float)
    assert 0 < sparse["across_positions"]["p_value"] <= 1


def test_degenerate_curves_say_so():
    assert unpaired_position_test([("1", 2, 3), ("2-3", 0, 0)])["reason"] == ("1 non-empty position bucket(s): no "
                                                                              "shape to test")
    assert shape_verdict(unpaired_position_test([("1", 2, 3)])) == "1 non-empty position bucket(s): no shape to test"
    all_right = unpaired_position_test([("1", 3, 3), ("2-3", 2, 2), ("4-5", 4, 4)])
    assert all_right["first_vs_last"]["p_value"] == 1.0 and all_right["across_positions"]["p_value"] == 1.0
    with pytest.raises(ValueError, match="between 0 and the answers"):
        unpaired_position_test([("1", 4, 3), ("2-3", 0, 1)])


def test_paired_sweep_uses_mcnemar_and_cochrans_q():
    # 5 questions, the gold passage at positions 1, 2, 3
    sweep = [[1, 0, 1], [1, 0, 0], [1, 1, 1], [1, 0, 0], [0, 0, 1]]
    result = paired_position_test(sweep, ["1", "2", "3"])
    # first vs last: right at 1 only on q2, q4; at 3 only on q5 -> exact McNemar on 2 vs 1 discordant pairs: p = 1
    pair = result["first_vs_last"]
    assert (pair["only_first"], pair["only_last"], pair["p_value"]) == (2, 1, 1.0)
    assert pair["difference"] == pytest.approx(3 / 5 - 4 / 5)
    # Cochran's Q = (k-1) [k sum C_j^2 - N^2] / (k N - sum R_i^2) with column sums C = 4, 1, 3 (N = 8) and row
    # sums R = 2, 1, 3, 1, 1: 2 (3 * 26 - 64) / (24 - 16) = 3.5; chi-square with 2 df: p = exp(-3.5 / 2) = 0.1738
    across = result["across_positions"]
    assert across["statistic"] == pytest.approx(3.5) and across["df"] == 2
    assert across["p_value"] == pytest.approx(np.exp(-1.75))
    assert result["rates"]["2"]["mean"] == 0.2 and result["rates"]["2"]["method"] == "wilson" and result["n"] == 5
    # ten questions right at position 1 and wrong at the last: McNemar p = 2 / 2^10
    recency = paired_position_test([[1, 0]] * 10 + [[1, 1]] * 3)
    assert recency["positions"] == ["1", "2"] and recency["first_vs_last"]["p_value"] == pytest.approx(2 / 1024)


def test_paired_sweep_without_variation_and_bad_input():
    flat = paired_position_test([[1, 1, 1], [0, 0, 0]])
    assert flat["across_positions"]["p_value"] == 1.0 and "no variation" in flat["across_positions"]["note"]
    assert flat["first_vs_last"]["p_value"] == 1.0
    with pytest.raises(ValueError, match="at least 2 positions"):
        paired_position_test([[1], [0]])
    with pytest.raises(ValueError, match="0/1"):
        paired_position_test([[1, 0.5]])
    with pytest.raises(ValueError, match="labels"):
        paired_position_test([[1, 0]], ["1", "2", "3"])
