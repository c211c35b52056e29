"""The AUROC functions of gate comparisons (``evaluation.statistics.auroc``): the rank form against scikit-learn,
DeLong's
paired test against its definition's consequences (identical scores, a perfect score, its size under the null), and
the comparison of gates with the reference gates (TA-ARE, vanilla). Synthetic scores: these test arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from icr2_components.evaluation.gates.gate_tradeoff import compare_methods, intersection_union_claim
from icr2_components.evaluation.gates.need_labels import LabelledQuestion, needs_retrieval
from icr2_components.evaluation.statistics.auroc import auroc_difference, auroc_interval, auroc_rows, delong_test


@pytest.mark.unit
def test_rank_auroc_equals_scikit_learn_with_ties():
    rng = np.random.default_rng(3)
    labels = rng.random(300) < 0.3
    scores = np.round(rng.random(300) + 0.4 * labels, 1)  # rounded: many ties
    assert float(auroc_rows(scores, labels)) == pytest.approx(roc_auc_score(labels, scores))
    rows = np.vstack([scores, -scores])
    assert auroc_rows(rows, labels) == pytest.approx([roc_auc_score(labels, scores), roc_auc_score(labels, -scores)])


@pytest.mark.unit
def test_auroc_interval_leaves_out_unknowns_and_says_when_a_class_is_missing():
    assert auroc_interval([0.9, None, 0.1, 0.5], [True, True, False, None])["n"] == 2
    assert auroc_interval([0.9, 0.1], [True, True])["method"] == "none"


@pytest.mark.unit
def test_delong_identical_scores_have_no_difference_and_p_one():
    rng = np.random.default_rng(0)
    labels = rng.random(80) < 0.4
    scores = rng.random(80)
    test = delong_test(scores, scores, labels)
    assert test["difference"] == 0.0 and test["p_value"] == 1.0
    result = auroc_difference(scores.tolist(), scores.tolist(), labels.tolist())
    assert result["difference"]["ci95"] == [0.0, 0.0] and result["p_value"] == 1.0


@pytest.mark.unit
def test_delong_finds_a_real_difference_and_its_interval_excludes_zero():
    rng = np.random.default_rng(1)
    labels = rng.random(200) < 0.3
    informative = labels + rng.normal(0, 0.6, 200)
    noise = rng.normal(0, 1, 200)
    result = auroc_difference(informative.tolist(), noise.tolist(), labels.tolist(), seed=0)
    assert result["auroc_a"] == pytest.approx(roc_auc_score(labels, informative))
    assert result["difference"]["mean"] == pytest.approx(result["auroc_a"] - result["auroc_b"])
    assert result["p_value"] < 1e-4 and result["difference"]["ci95"][0] > 0


@pytest.mark.unit
def test_delong_holds_its_size_under_the_null():
    # two uninformative scores: about 5% of the tests may reject at 0.05 (200 draws: 2.5% to 8.5% allows for chance)
    rng = np.random.default_rng(7)
    rejections = 0
    for _ in range(200):
        labels = rng.random(120) < 0.35
        rejections += delong_test(rng.random(120), rng.random(120), labels)["p_value"] < 0.05
    assert 5 <= rejections <= 17


@pytest.mark.unit
def test_delong_refuses_a_missing_class():
    with pytest.raises(ValueError, match="at least 2 questions of each class"):
        delong_test(np.array([0.1, 0.2, 0.3]), np.array([0.3, 0.2, 0.1]), np.array([1, 0, 0]))


def _labelled(outcomes):
    flags = {"context_only": (False, True), "both_right": (True, True), "closed_book_only": (True, False),
             "both_wrong": (False, False)}
    return [LabelledQuestion(f"q{i}", f"question {i}", "s", *flags[o], o, needs_retrieval(o), "reader")
            for i, o in enumerate(outcomes)]


@pytest.mark.unit
def test_plumbing_learned_gate_against_the_reference_gates():
    rng = np.random.default_rng(2)
    outcomes = rng.choice(["context_only", "both_wrong", "both_right"], size=150, p=[0.3, 0.5, 0.2]).tolist()
    labelled = _labelled(outcomes)
    need = np.array([q.needs_retrieval for q in labelled], dtype=float)
    good = (need + rng.normal(0, 0.5, 150)).tolist()
    chance = rng.random(150).tolist()
    methods = {"always": {"method": "always", "decisions": [True] * 150, "scores": None},
               "never": {"method": "never", "decisions": [False] * 150, "scores": None},
               "TA-ARE": {"method": "ta_are", "decisions": [s >= 0.5 for s in chance], "scores": chance},
               "mine": {"method": "learned", "artifact": "a.json", "decisions": [s >= 0.5 for s in good],
                        "scores": good}}
    report = compare_methods(methods, labelled, cost=0.1, seed=0)
    pairs = report["versus_references"]
    assert [(p["method"], p["reference"]) for p in pairs] == [("mine", "TA-ARE")]  # found by method, not by name
    assert pairs[0]["auroc"]["beats"] is True and pairs[0]["auroc"]["p_holm"] < 0.001
    assert pairs[0]["objective"]["difference"]["mean"] > 0 and "p_holm" in pairs[0]["objective"]


def test_intersection_union_claim_needs_every_comparison_to_hold():
    """A pre-named gate's claim 'beats TA-ARE and vanilla by AUROC and objective' holds only if all four hold."""
    rng = np.random.default_rng(5)
    n = 300
    outcomes = rng.choice(["context_only", "both_wrong", "both_right"], size=n, p=[0.3, 0.5, 0.2]).tolist()
    labelled = _labelled(outcomes)
    need = np.array([q.needs_retrieval for q in labelled], dtype=float)
    good = (need + rng.normal(0, 0.4, n)).tolist()
    chance_a, chance_b = rng.random(n).tolist(), rng.random(n).tolist()
    methods = {"always": {"method": "always", "decisions": [True] * n, "scores": None},
               "TA-ARE": {"method": "ta_are", "decisions": [s >= 0.5 for s in chance_a], "scores": chance_a},
               "vanilla": {"method": "vanilla", "decisions": [s >= 0.5 for s in chance_b], "scores": chance_b},
               # ranks need well and retrieves exactly when it is needed: beats both on both metrics
               "mine": {"method": "learned", "artifact": "a.json", "decisions": [bool(x) for x in need],
                        "scores": good},
               # ranks need well but retrieves for nobody: its objective is no better than the references'
               "shy": {"method": "learned", "artifact": "b.json", "decisions": [False] * n, "scores": good}}
    pairs = compare_methods(methods, labelled, cost=0.1, seed=0)["versus_references"]
    claim = intersection_union_claim(pairs, "mine")
    assert claim["holds"] is True and claim["references"] == ["TA-ARE", "vanilla"]
    assert len(claim["parts"]) == 4 and all(p["holds"] and p["p_value"] < 0.05 and p["ci95"][0] > 0
                                            for p in claim["parts"])
    shy = intersection_union_claim(pairs, "shy")
    assert shy["holds"] is False
    assert {(p["metric"], p["holds"]) for p in shy["parts"]} == {("auroc", True), ("objective", False)}
    with pytest.raises(ValueError, match="no comparison of 'nobody'"):
        intersection_union_claim(pairs, "nobody")
    with pytest.raises(ValueError, match="alpha must be in"):
        intersection_union_claim(pairs, "mine", alpha=1.5)
