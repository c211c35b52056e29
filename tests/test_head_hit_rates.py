"""ICR2 figure 4 as numbers (evaluation/reports/head_hit_rates.py): the heads of a probe artifact that retrieve
above chance, on a hand-made artifact checked against scipy, and on the committed probe of the SFT-DA reader."""

import json
from pathlib import Path

import pytest
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from icr2_components.evaluation.reports.head_hit_rates import heads_above_chance

pytestmark = pytest.mark.unit


def artifact(rates: list[list[float]], n: int = 100, chance: float = 1 / 6) -> dict:
    return {"hit_rates": [rates], "chance_hit_rates": [chance], "instances": n}


def test_heads_count_when_their_holm_adjusted_binomial_test_beats_chance():
    rates = [[0.17, 0.30, 0.25], [0.45, 0.10, 0.26]]
    result = heads_above_chance(artifact(rates))
    p = [binomtest(round(r * 100), 100, 1 / 6, alternative="greater").pvalue for row in rates for r in row]
    assert result["heads_above_chance"] == int(multipletests(p, method="holm")[0].sum()) == 3  # 0.45, 0.30, 0.26
    assert result["peak"]["layer"] == 1 and result["peak"]["head"] == 0 and result["peak"]["rate"] == 0.45
    assert result["peak"]["ci95"][0] < 0.45 < result["peak"]["ci95"][1]
    assert result["mean_hit_rate"] == pytest.approx(sum(map(sum, rates)) / 6)
    with pytest.raises(ValueError, match=r"M = 1\.\.1"):
        heads_above_chance(artifact(rates), m=2)
    with pytest.raises(ValueError, match="no instance"):
        heads_above_chance(artifact(rates, n=0))


def test_the_sft_da_readers_probe_has_retrieval_heads_above_chance():
    probe = json.loads(Path("bench/results/icr2_table3/rap_heads_sft_da.json").read_text())
    result = heads_above_chance(probe)
    assert result["heads"] == 270 and result["instances"] == 100 and result["chance"] == pytest.approx(1 / 6, 1e-5)
    assert result["heads_above_chance"] > 0 and result["peak"]["ci95"][0] > result["chance"]
    assert [result["peak"]["layer"], result["peak"]["head"]] == probe["heads"][0]  # the probe's top head
