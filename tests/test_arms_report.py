"""The arms report (evaluation/reports/arms_report.py) pairs arms answered in different context types by question,
and its claim verdict follows the registered rule: beat every reference by the margin with Holm p < 0.05, where an
arm not run counts p = 1. The counts are hand-made so that every figure can be checked against scipy directly."""

import json

import pytest
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from icr2_components.evaluation.reports.arms_report import arms_markdown, arms_report, load_arm

pytestmark = pytest.mark.unit


def arm(rights: list[bool], context_type: str = "corpus") -> dict:
    return {
        f"q{i:03d}": {
            "key": f"p|q{i:03d}|{context_type}",
            "question_id": f"q{i:03d}",
            "context_type": context_type,
            "answers": ["Paris"],
            "answer": "The answer is Paris." if right else "London",
        }
        for i, right in enumerate(rights)
    }


def test_pairs_by_question_and_tests_the_claim(tmp_path):
    n = 100
    reference = [i < 20 for i in range(n)]            # 0.20
    weak = [i < 25 for i in range(n)]                 # +0.05: not the margin
    strong = [i < 15 or 30 <= i < 65 for i in range(n)]  # 0.50: 35 only-arm vs 5 only-reference
    arms = {"vanilla_rag": arm(reference, "open"), "untrained": arm(reference), "sft_da": arm(strong),
            "sft_cci": arm(weak), "sft_rta": {}}
    report = arms_report(arms, ["vanilla_rag", "untrained"], ["sft_da", "sft_cci", "sft_rta"])
    assert report["n"] == n and report["not_run"] == ["sft_rta"]
    test = report["arms"]["sft_da"]["vs"]["vanilla_rag"]["answer_match"]
    assert (test["only_arm"], test["only_reference"]) == (35, 5)
    assert test["p"] == pytest.approx(binomtest(35, 40, 0.5).pvalue)
    assert test["difference"] == pytest.approx(0.30)
    raw = [report["arms"]["sft_da"]["vs"][r]["answer_match"]["p"] for r in ("vanilla_rag", "untrained")] + \
          [report["arms"]["sft_cci"]["vs"][r]["answer_match"]["p"] for r in ("vanilla_rag", "untrained")] + [1.0, 1.0]
    expected = multipletests(raw, method="holm")[1]
    assert report["claim"]["per_arm"]["sft_da"]["vanilla_rag"]["p_holm"] == pytest.approx(expected[0])
    assert report["claim"]["holds"] and report["claim"]["arms_for_which_it_holds"] == ["sft_da"]
    assert not report["claim"]["complete"]  # sft_rta was not run: p = 1 in the family, and the verdict says so
    assert report["arms"]["sft_da"]["answer_match"]["rate"] == 0.5
    assert "sft_rta" in arms_markdown(report, ["vanilla_rag", "untrained"])


def test_a_small_gain_does_not_make_the_claim_and_only_common_questions_count(tmp_path):
    reference = arm([i < 20 for i in range(100)])
    close = arm([i < 28 for i in range(100)])     # +0.08 < 0.10, even if it were significant
    del close["q099"]                               # unanswered: every arm is scored on the 99 common questions
    report = arms_report({"vanilla_rag": reference, "untrained": reference, "sft_da": close},
                         ["vanilla_rag", "untrained"], ["sft_da"])
    assert report["n"] == 99 and not report["claim"]["holds"] and report["claim"]["complete"]
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(dict(r, pipeline="p")) + "\n" for r in close.values()))
    assert set(load_arm(path, "corpus", "p")) == set(close) and load_arm(path, "gold") == {}


def test_registered_pairs_are_one_holm_family_of_the_pairs_run():
    n = 100
    sft_da = arm([i < 30 for i in range(n)])                 # 0.30
    sft_rta = arm([i < 10 or 30 <= i < 32 for i in range(n)])  # 0.12: 2 only-arm vs 20 only-baseline
    sft_cci = arm([i < 34 for i in range(n)])                # 0.34: 4 vs 0
    arms = {"vanilla_rag": sft_da, "untrained": sft_da, "sft_da": sft_da, "sft_rta": sft_rta, "sft_cci": sft_cci,
            "sft_da_gold_only": {}}
    pairs = [("sft_rta", "sft_da"), ("sft_cci", "sft_da"), ("sft_da", "sft_da_gold_only")]
    report = arms_report(arms, ["vanilla_rag", "untrained"], ["sft_rta"], pairs=pairs)
    rta, cci, gold_only = report["pairs"]
    assert (rta["answer_match"]["only_arm"], rta["answer_match"]["only_reference"]) == (2, 20)
    assert rta["answer_match"]["difference"] == pytest.approx(-0.18)
    raw = [binomtest(2, 22, 0.5).pvalue, binomtest(4, 4, 0.5).pvalue]
    adjusted = multipletests(raw, method="holm")[1]
    assert rta["answer_match"]["p_holm_family"] == pytest.approx(adjusted[0])
    assert cci["answer_match"]["p_holm_family"] == pytest.approx(adjusted[1])
    assert "answer_match" not in gold_only  # the baseline was not run: listed, not tested
    table = arms_markdown(report, ["vanilla_rag", "untrained"])
    assert "| sft_da vs sft_da_gold_only | not run |" in table and "| sft_rta vs sft_da | -0.180 | 2 / 20 |" in table


def test_selection_recall_against_a_random_pick_of_as_many_passages():
    from icr2_components.evaluation.reports.arms_report import selection_recall

    contexts = {f"q{i:03d}": [f"q{i:03d}-p{j}" for j in range(6)] for i in range(60)}
    records = {q: {"shown_ids": ids[:2], "gold_ids": [ids[0] if i < 30 else ids[5]]}  # 30 of 60 kept the gold
               for i, (q, ids) in enumerate(contexts.items())}
    result = selection_recall(records, contexts)
    assert (result["n"], result["hits"], result["rate"]) == (60, 30, 0.5)
    assert result["chance"] == pytest.approx(1 / 3)  # 2 of 6 passages, one gold: 1 - C(5,2)/C(6,2)
    assert result["p"] == pytest.approx(binomtest(30, 60, 1 / 3, alternative="greater").pvalue)
    # two gold passages of six raise that question's chance to 1 - C(4,2)/C(6,2) = 0.6
    two_gold = dict(records, q000={"shown_ids": ["q000-p0", "q000-p1"], "gold_ids": ["q000-p4", "q000-p5"]})
    assert selection_recall(two_gold, contexts)["chance"] == pytest.approx((59 / 3 + 0.6) / 60)
    outside = dict(records, q001={"shown_ids": ["elsewhere"], "gold_ids": ["q001-p0"]})
    with pytest.raises(ValueError, match="not in its corpus"):
        selection_recall(outside, contexts)


def test_selection_after_before_pairs_the_heads_hits_on_the_same_questions():
    from icr2_components.evaluation.reports.arms_report import selection_after_before

    contexts = {f"q{i:03d}": [f"q{i:03d}-p{j}" for j in range(6)] for i in range(40)}
    gold = {q: [ids[0]] for q, ids in contexts.items()}
    # after: the first 30 questions keep the gold passage; before: the first 10 and questions 35-39
    after = {q: {"shown_ids": ids[:1] if i < 30 else ids[4:], "gold_ids": gold[q]}
             for i, (q, ids) in enumerate(contexts.items())}
    before = {q: {"shown_ids": ids[:2] if i < 10 or i >= 35 else ids[3:5], "gold_ids": gold[q]}
              for i, (q, ids) in enumerate(contexts.items()) if i != 39}  # one question the before arm never answered
    result = selection_after_before(after, before, contexts)
    assert result["n"] == 39
    assert (result["after"]["successes"], result["before"]["successes"]) == (30, 14)
    assert (result["only_arm"], result["only_reference"]) == (20, 4)  # 10-29 after only; 35-38 before only
    assert result["p"] == pytest.approx(binomtest(4, 24, 0.5).pvalue)
    assert result["difference"] == pytest.approx(16 / 39)
