"""ICR2 figure 4 as numbers: how many attention heads of a reader retrieve above chance, and how well the best do,
read from a RAP probe artifact (``icr2 probe-heads``), to compare a reader before and after fine-tuning.

ICR2 (https://arxiv.org/abs/2501.08248, section 6.3) plots every head's hit rate (equation 3: the share of the
gold passages among the head's top-M passages, averaged over the probed instances) for the untrained reader and
each SFT variant, and reads two things off it: fine-tuning gives **more** retrieval heads and a **higher peak**.
Its corpora hold hundreds of passages, so "above zero" separates retrieval heads there; with a few passages a
head hits by chance often, so here a head counts when its hit rate is above chance by an exact one-sided binomial
test, Holm-adjusted over all the reader's heads.

Usage:
    >>> summary = heads_above_chance(json.loads(Path("rap_heads_untrained.json").read_text()))
    >>> summary["heads_above_chance"], summary["peak"]["rate"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icr2_components.evaluation.statistics.paired_comparison import holm
from icr2_components.evaluation.statistics.proportions import wilson_interval


def heads_above_chance(artifact: Mapping[str, Any], m: int = 1, alpha: float = 0.05) -> dict[str, Any]:
    """Count a probe artifact's heads whose top-``m`` hit rate beats chance, and report the best head.

    A head's hits are its hit rate times the probed instances, rounded: exact where every instance has one gold
    passage, an approximation where some have several (their per-instance shares are not kept in the artifact).

    :param artifact: a retrieval-heads artifact as JSON (``hit_rates[m-1][layer][head]``, ``chance_hit_rates``,
        ``instances``).
    :param m: passages each head keeps (ICR2's M).
    :param alpha: level of the Holm-adjusted one-sided tests.
    :returns: ``{"m", "instances", "heads", "chance", "heads_above_chance", "mean_hit_rate", "peak"}``; ``peak``
        is the best head (``layer``, ``head``, ``rate``, Wilson ``ci95``; chosen on the same instances, so its
        rate is an optimistic estimate).
    :raises ValueError: ``m`` is outside the artifact's probed range, or the artifact probed no instance.
    """
    from scipy.stats import binomtest

    rates_by_m, n = artifact["hit_rates"], int(artifact["instances"])
    if not 1 <= m <= len(rates_by_m):
        raise ValueError(f"m = {m}: the artifact has hit rates for M = 1..{len(rates_by_m)}.")
    if n < 1:
        raise ValueError("The artifact probed no instance.")
    chance = float(artifact["chance_hit_rates"][m - 1])
    heads = [(layer, head, float(rate)) for layer, row in enumerate(rates_by_m[m - 1]) for head, rate in enumerate(row)]
    p_values = [binomtest(round(rate * n), n, chance, alternative="greater").pvalue for _, _, rate in heads]
    above = sum(1 for p in holm(p_values) if p < alpha)
    layer, head, rate = max(heads, key=lambda item: item[2])
    low, high = wilson_interval(round(rate * n), n)
    return {"m": m, "instances": n, "heads": len(heads), "chance": chance, "heads_above_chance": above,
            "mean_hit_rate": sum(r for _, _, r in heads) / len(heads),
            "peak": {"layer": layer, "head": head, "rate": rate, "ci95": [low, high]}}
