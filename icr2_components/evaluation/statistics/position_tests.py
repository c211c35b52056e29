"""Is a position curve's shape significant? Tests for accuracy by gold passage position, unpaired and paired.

Usage:
    >>> from icr2_components.evaluation.statistics.position_tests import paired_position_test, unpaired_position_test
    >>> # compare's curves: different questions in each bucket -> (bucket, right, answers)
    >>> unpaired_position_test([("1", 18, 20), ("2-3", 9, 20), ("4-5", 8, 20)], seed=0)["first_vs_last"]["p_value"]
    0.0012...
    >>> # a position sweep: the same questions with the gold passage at each position (rows: questions)
    >>> sweep = [[1, 0, 1], [1, 0, 0], [1, 1, 1], [1, 0, 0], [0, 0, 1]]
    >>> paired_position_test(sweep, ["1", "2", "3"])["first_vs_last"]["p_value"]   # 3 vs 0 discordant pairs
    0.25

``icr2 compare``'s curves group *different* questions by where the pipeline's retrieval put the gold passage,
so their buckets are independent samples:

- first vs last: Fisher's exact test (``scipy.stats.fisher_exact``, two-sided) on the 2x2 table right/wrong x
  {first non-empty position bucket, last non-empty position bucket} ("gold not shown" is no position);
- across positions: the Fisher-Freeman-Halton exact test of homogeneity over every non-empty position bucket
  (the k x 2 table right/wrong per bucket; its p-value estimated from ``MONTE_CARLO_TABLES`` random tables with
  the observed margins, seeded, as ``scipy.stats.fisher_exact`` does for tables larger than 2x2).

A sweep that places the gold passage at every position for the *same* questions (``bench/position_sweep.py``)
is paired:

- first vs last: the exact McNemar test on the questions right at one of the two positions only
  (``proportions.paired_outcomes``, ``scipy.stats.binomtest``);
- across positions: Cochran's Q (``statsmodels.stats.contingency_tables.cochrans_q``), the k-position extension
  of McNemar (chi-square with k - 1 degrees of freedom; questions right or wrong at every position carry no
  information).

A table or matrix without any variation (every answer right, or every answer wrong) gets p = 1.0 and says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from icr2_components.evaluation.statistics.intervals import DEFAULT_SEED, mean_interval
from icr2_components.evaluation.statistics.proportions import paired_outcomes

MONTE_CARLO_TABLES = 9999
ALPHA = 0.05
FISHER = "Fisher exact (two-sided)"
FREEMAN_HALTON = f"Fisher-Freeman-Halton exact, Monte Carlo ({MONTE_CARLO_TABLES} tables, seeded)"


def _fisher_2x2(table: list[list[int]]) -> float:
    from scipy.stats import fisher_exact

    if sum(row[0] for row in table) == 0 or sum(row[1] for row in table) == 0:
        return 1.0  # every answer right (or wrong) in both buckets
    return float(fisher_exact(table, alternative="two-sided").pvalue)


def _homogeneity(table: list[list[int]], seed: int) -> float:
    """The Fisher-Freeman-Halton p-value of a k x 2 table, estimated from random tables with its margins: what
    ``scipy.stats.fisher_exact`` does for tables larger than 2x2 (``random_table`` + ``monte_carlo_test``, tables
    less probable than the observed one are as extreme), called directly because scipy 1.17's version mis-shapes
    its batches when a table has more cells than answers (it then returns an array)."""
    from scipy.stats import monte_carlo_test, random_table

    if sum(row[0] for row in table) == 0 or sum(row[1] for row in table) == 0:
        return 1.0
    if len(table) == 2:
        return _fisher_2x2(table)
    observed = np.asarray(table)
    shape = observed.shape
    tables = random_table(observed.sum(axis=1), observed.sum(axis=0), seed=np.random.default_rng(seed))

    def draw(size):
        return tables.rvs(size=size[0]).reshape(size[0], -1)

    def probability(flat, axis=-1):
        flat = np.moveaxis(flat, axis, -1)
        return tables.pmf(flat.reshape(flat.shape[:-1] + shape))

    result = monte_carlo_test(observed.ravel(), draw, probability, vectorized=True, n_resamples=MONTE_CARLO_TABLES,
                              alternative="less")
    return float(result.pvalue)


def unpaired_position_test(buckets: Sequence[tuple[str, int, int]], seed: int = DEFAULT_SEED) -> dict:
    """Tests on ``(label, right, answers)`` per position bucket, in position order (empty buckets are skipped):
    ``first_vs_last`` (Fisher exact) and ``across_positions`` (Fisher-Freeman-Halton); ``None`` for each with
    fewer than two non-empty buckets (``reason`` says so)."""
    for label, right, n in buckets:
        if not 0 <= right <= n:
            raise ValueError(f"Bucket {label!r}: right answers ({right}) must be between 0 and the answers ({n}).")
    used = [(label, right, n) for label, right, n in buckets if n > 0]
    if len(used) < 2:
        return {"first_vs_last": None, "across_positions": None,
                "reason": f"{len(used)} non-empty position bucket(s): no shape to test"}
    (first, r1, n1), (last, r2, n2) = used[0], used[-1]
    table = [[r1, n1 - r1], [r2, n2 - r2]]
    full = [[right, n - right] for _, right, n in used]
    return {
        "first_vs_last": {"first": first, "last": last, "table": table, "difference": r2 / n2 - r1 / n1,
                          "test": FISHER, "p_value": _fisher_2x2(table)},
        "across_positions": {"buckets": [label for label, _, _ in used], "test": FISHER if len(used) == 2 else
                             FREEMAN_HALTON, "p_value": _homogeneity(full, seed)},
        "reason": None,
    }


def paired_position_test(outcomes: Sequence[Sequence[float]], positions: Sequence[str] | None = None,
                         seed: int = DEFAULT_SEED) -> dict:
    """Tests on a paired sweep: ``outcomes[i][j]`` is 1 when question i was answered right with the gold passage
    at position j (the same questions at every position, 0/1). Returns the ``positions``, each position's rate
    with its interval (``rates``), ``first_vs_last`` (exact McNemar: ``only_first``, ``only_last``, ``p_value``)
    and ``across_positions`` (Cochran's Q: ``statistic``, ``df``, ``p_value``)."""
    matrix = np.asarray(outcomes, dtype=float)
    if matrix.ndim != 2 or matrix.shape[1] < 2 or matrix.shape[0] < 1:
        raise ValueError("A paired sweep needs a questions x positions matrix with at least 2 positions.")
    if not np.all((matrix == 0) | (matrix == 1)):
        raise ValueError("A paired sweep's outcomes are 0/1 (right or wrong at each position).")
    k = matrix.shape[1]
    labels = list(positions) if positions is not None else [str(j + 1) for j in range(k)]
    if len(labels) != k:
        raise ValueError(f"{len(labels)} position labels for {k} positions.")
    first = paired_outcomes(list(matrix[:, -1] == 1), list(matrix[:, 0] == 1))
    varying = np.any(matrix != matrix[:, :1], axis=1)
    if np.any(varying):
        from statsmodels.stats.contingency_tables import cochrans_q

        q = cochrans_q(matrix.astype(int))
        across = {"test": "Cochran's Q", "statistic": float(q.statistic), "df": int(q.df), "p_value": float(q.pvalue)}
    else:
        across = {"test": "Cochran's Q", "statistic": 0.0, "df": k - 1, "p_value": 1.0,
                  "note": "every question right or wrong at every position: no variation"}
    return {
        "positions": labels,
        "n": int(matrix.shape[0]),
        "rates": {label: mean_interval(list(matrix[:, j]), seed) for j, label in enumerate(labels)},
        "first_vs_last": {"first": labels[0], "last": labels[-1], "test": "exact McNemar",
                          "only_last": first["only_a"], "only_first": first["only_b"],
                          "difference": float(np.mean(matrix[:, -1]) - np.mean(matrix[:, 0])),
                          "p_value": float(first["p_value"])},
        "across_positions": across,
    }


def shape_verdict(test: dict | None, p_holm: float | None = None, alpha: float = ALPHA) -> str:
    """One phrase for a curve's shape: the first-vs-last result (Holm-adjusted when given) and across positions."""
    if not test or not test.get("first_vs_last"):
        return (test or {}).get("reason") or "no test"
    pair, across = test["first_vs_last"], test["across_positions"]
    p = pair["p_value"] if p_holm is None else p_holm
    direction = "higher" if pair["difference"] > 0 else "lower"
    if p < alpha:
        first_last = f"last ({pair['last']}) {direction} than first ({pair['first']}), p = {p:.3g}"
    else:
        first_last = f"first ({pair['first']}) vs last ({pair['last']}): no significant difference (p = {p:.3g})"
    flat = "positions differ" if across["p_value"] < alpha else "no significant difference across positions"
    return f"{first_last}; {flat} (p = {across['p_value']:.3g})"


__all__ = ["FISHER", "FREEMAN_HALTON", "MONTE_CARLO_TABLES", "paired_position_test", "shape_verdict",
           "unpaired_position_test"]
