"""bench/retrieval_quality.py's nDCG@k (sklearn's ndcg_score underneath) on rankings worked out by hand: the ideal
ranking counts judged passages the run never retrieved, and a ranking shorter than k is not filled with them."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "retrieval_quality.py"


@pytest.fixture(scope="module")
def ndcg_at_k():
    spec = importlib.util.spec_from_file_location("bench_retrieval_quality", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ndcg_at_k


def test_ndcg_by_hand(ndcg_at_k):
    relevance = {"a": 1, "b": 2, "c": 1}  # c is judged but never retrieved
    dcg = 1 / math.log2(2) + 2 / math.log2(4)  # a at rank 1, b at rank 3
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(["a", "x", "b"], relevance, k=10) == pytest.approx(dcg / idcg, abs=1e-12)
    assert ndcg_at_k(["b", "a", "c"], relevance, k=10) == pytest.approx(1.0)
    # k cuts the ranking: only a (rank 1) counts within k = 2, against the ideal b, a
    assert ndcg_at_k(["a", "x", "b"], relevance, k=2) == pytest.approx(1 / (2 + 1 / math.log2(3)), abs=1e-12)
    assert ndcg_at_k(["c"], relevance, k=1) == pytest.approx(0.5)
    assert ndcg_at_k([], relevance) == 0.0
    assert ndcg_at_k(["a"], {}) == 0.0  # nothing judged relevant
