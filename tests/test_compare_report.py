"""The compare report's position curves and external metrics on hand-built answer records (no generation)."""

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from icr2_components.evaluation.metrics.external_metrics import (
    haystack_exact_match,
    rouge_score_import_error,
    stemmed_rouge_l,
)
from icr2_components.evaluation.metrics.text_metrics import answer_match, exact_match, rouge_l, short_answer_exact_match
from icr2_components.evaluation.reports.compare_report import TABLE_COLUMNS, build_report
from icr2_components.evaluation.reports.position_curves import (
    BUCKET_LABELS,
    NOT_SHOWN,
    first_gold_position,
    position_bucket,
    position_curves,
)
from icr2_components.evaluation.reports.rendering import write_report
from icr2_components.evaluation.statistics.proportions import wilson_interval
from icr2_components.text.normalization import normalize_answer

pytestmark = pytest.mark.unit


def record(pipeline, qid, answer, answers, shown, gold, context_type="open", reads_context=True, **extra):
    return {"key": f"{pipeline}|{qid}|{context_type}", "pipeline": pipeline, "question_id": qid,
            "context_type": context_type, "answer": answer, "answers": answers, "shown_ids": shown,
            "gold_ids": gold, "reads_context": reads_context, "selects_passages": reads_context,
            "latency_s": 0.1, "prompt_tokens": 10, **extra}


def spec(name, context_input="prompt.documents"):
    return SimpleNamespace(name=name, context_input=context_input)


def hand_built_records():
    shown = [f"p{i}" for i in range(1, 31)]
    rag = [
        record("rag", "q1", "Paris", ["Paris"], shown, ["p1"]),                   # position 1, exact
        # 2-3, match not exact ("it is Paris" was, until exact match was taken on the answer span "Paris")
        record("rag", "q2", "Paris, in France", ["Paris"], shown, ["p2"]),
        record("rag", "q3", "London", ["Paris"], shown, ["p3", "p1x"]),           # 2-3, wrong
        record("rag", "q4", "Rome", ["Rome"], shown, ["p7"]),                     # 6-10
        record("rag", "q5", "Rome", ["Rome"], shown, ["p25", "p5"]),              # first gold at 5: 4-5
        record("rag", "q6", "Oslo", ["Oslo"], shown, ["p30"]),                    # >20
        record("rag", "q7", "Oslo", ["Oslo"], shown[:3], ["zz"]),                 # gold not shown
        record("rag", "q8", "Oslo", ["Oslo"], shown, []),                         # no gold known: left out
        record("rag", "q9", "", ["Oslo"], None, ["p1"], error="too long"),        # error: left out
        record("rag", "q1", "Paris", ["Paris"], ["p1"], ["p1"], context_type="gold"),  # other context type
    ]
    closed = [record("closed_book", f"q{i}", "Paris", ["Paris"], None, ["p1"], reads_context=False)
              for i in range(1, 4)]
    return rag + closed


def test_first_gold_position_and_buckets():
    assert first_gold_position(["a", "b", "c"], ["c", "b"]) == 2
    assert first_gold_position(["a"], ["z"]) is None
    assert first_gold_position(None, ["z"]) is None
    expected = {1: "1", 2: "2-3", 3: "2-3", 4: "4-5", 5: "4-5", 6: "6-10", 10: "6-10", 11: "11-20", 20: "11-20",
                21: ">20", 500: ">20", None: NOT_SHOWN}
    assert {p: position_bucket(p) for p in expected} == expected
    with pytest.raises(ValueError, match="1-based"):
        position_bucket(0)


def test_position_curves_match_a_recomputation_from_the_records():
    records = hand_built_records()
    section = position_curves(records, ["rag", "closed_book"])
    assert section["buckets"] == list(BUCKET_LABELS)
    assert (
        "closed_book" in section["left_out_pipelines"] and "closed-book" in section["left_out_pipelines"]["closed_book"]
    )
    curve = section["curves"]["rag"]
    # recomputed independently: open answers with a known gold passage and no error, grouped by bucket
    usable = [r for r in records if r["pipeline"] == "rag" and r["context_type"] == "open" and not r.get("error")
              and r["gold_ids"]]
    for bucket in BUCKET_LABELS:
        mine = [r for r in usable if position_bucket(first_gold_position(r["shown_ids"], r["gold_ids"])) == bucket]
        assert curve[bucket]["n"] == len(mine)
        for metric, function in (("answer_match", answer_match), ("exact_match", short_answer_exact_match)):
            expected = statistics.fmean(float(function(r["answer"], r["answers"])) for r in mine) if mine else None
            assert curve[bucket][metric] == (pytest.approx(expected) if mine else None)
    assert [curve[b]["n"] for b in BUCKET_LABELS] == [1, 2, 1, 1, 0, 1, 1]
    assert curve["2-3"]["answer_match"] == 0.5 and curve["2-3"]["exact_match"] == 0.0
    assert section["left_out_answers"]["rag"] == {"errors": 1, "no_gold_passage_known": 1, "passages_not_recorded": 0}


def test_report_writes_position_curves_and_metric_implementations(tmp_path):
    records = hand_built_records()
    report = build_report(records, [spec("rag"), spec("closed_book", None)], ["open", "gold"])
    files = write_report(report, tmp_path)
    saved = json.loads((tmp_path / "report.json").read_text())
    first = saved["position_curves"]["curves"]["rag"]["1"]
    assert {k: first[k] for k in ("n", "answer_match", "exact_match")} == {"n": 1, "answer_match": 1.0,
                                                                            "exact_match": 1.0}
    # each bucket's rate carries its Wilson interval: 1 of 1 right
    assert first["intervals"]["answer_match"] == {"mean": 1.0, "ci95": [pytest.approx(wilson_interval(1, 1)[0]), 1.0],
                                                  "n": 1, "method": "wilson"}
    assert (tmp_path / "position_curves.png").stat().st_size > 0 and "position_curves_png" in files
    markdown = (tmp_path / "report.md").read_text()
    assert "## Position curves" in markdown and "| rag | n | 1 | 2 | 1 | 1 | 0 | 1 | 1 |" in markdown
    low, high = wilson_interval(1, 2)  # bucket 2-3: q2 matches, q3 does not
    one = wilson_interval(1, 1)[0]
    assert f"| rag | answer_match | 1.000 [{one:.2f}, 1.00] | 0.500 [{low:.2f}, {high:.2f}] |" in markdown
    # the curve's shape: first bucket (1: 1/1) against the last non-empty position bucket (>20: 1/1)
    shape = saved["position_curves"]["shape"]["rag"]["answer_match"]
    assert shape["first_vs_last"]["first"] == "1" and shape["first_vs_last"]["last"] == ">20"
    assert shape["first_vs_last"]["table"] == [[1, 0], [1, 0]] and shape["first_vs_last"]["p_value"] == 1.0
    assert "| rag | answer_match | 1 vs >20 | 1/1 vs 1/1 |" in markdown
    assert "closed_book is not in the position curves" in markdown
    assert "position_curves.png" in (tmp_path / "report.html").read_text()
    implementations = saved["metric_implementations"]
    assert "AnswerExactMatchEvaluator" in implementations["exact_match"]
    assert "text_metrics.rouge_l" in implementations["rouge_l"]
    assert "RougeScorer" in implementations["rouge_l_ragas"]


def test_report_without_passage_showing_pipelines_has_no_curve(tmp_path):
    closed = [r for r in hand_built_records() if r["pipeline"] == "closed_book"]
    report = build_report(closed, [spec("closed_book", None)], ["open"])
    write_report(report, tmp_path)
    assert report["position_curves"]["curves"] == {}
    assert not (tmp_path / "position_curves.png").exists()
    assert "No pipeline showed passages" in (tmp_path / "report.md").read_text()


PREDICTIONS = ["The Eiffel Tower.", "the tall Eiffel Tower", "Eiffel towers of Paris", "Paris", "", "Rome, Italy"]
GOLDS = [["eiffel tower"], ["eiffel tower", "tower"], ["Eiffel tower"], ["London"], ["Paris"], ["Rome", "Italy"]]


def test_haystack_exact_match_agrees_with_ours():
    ours = [float(exact_match(p, g)) for p, g in zip(PREDICTIONS, GOLDS, strict=True)]
    assert haystack_exact_match(PREDICTIONS, GOLDS) == ours


def test_the_stemmed_rouge_l_differs_from_ours_only_by_stemming():
    """ragas' RougeScore definition (rouge-score with Porter stemming) stems, ours does not."""
    assert rouge_score_import_error() is None
    from rouge_score.tokenizers import DefaultTokenizer

    plain, stemming = DefaultTokenizer(use_stemmer=False), DefaultTokenizer(use_stemmer=True)
    theirs = stemmed_rouge_l(PREDICTIONS, GOLDS)
    ours = [rouge_l(p, g) for p, g in zip(PREDICTIONS, GOLDS, strict=True)]
    for prediction, gold, mine, other in zip(PREDICTIONS, GOLDS, ours, theirs, strict=True):
        tokens = set(plain.tokenize(normalize_answer(" ".join([prediction, *gold]))))
        merges = len({tuple(stemming.tokenize(t)) for t in tokens}) < len(tokens)
        if merges:
            assert other >= mine  # stemming only merges tokens, so the LCS can only grow
        else:
            assert other == pytest.approx(mine), (prediction, gold)
    assert theirs[2] > ours[2]  # "towers" = "tower" once stemmed


def test_report_rows_carry_intervals_and_the_paired_section_against_the_baseline(tmp_path):
    """rag vs closed_book on q1-q3 (open): rag right on q1, q2 and wrong on q3; closed_book right on all three."""
    from icr2_components.evaluation.statistics.proportions import exact_mcnemar

    records = hand_built_records()
    report = build_report(records, [spec("rag"), spec("closed_book", None)], ["open", "gold"], baseline="closed_book")
    rag = report["summary"]["rag"]["open"]
    # 8 answers without error; answer match on q1, q2, q4, q5, q6, q7, q8 (q3 says London)
    assert rag["n"] == 8 and rag["answer_match"] == pytest.approx(7 / 8)
    assert rag["answer_match_ci95"] == list(wilson_interval(7, 8))
    assert rag["intervals"]["answer_match"] == {"mean": 0.875, "ci95": list(wilson_interval(7, 8)), "n": 8,
                                                "method": "wilson"}
    # every metric of the table has an interval dict; latency (0.1 everywhere) has no spread
    assert set(rag["intervals"]) == set(TABLE_COLUMNS)
    assert rag["intervals"]["latency_s"] == {"mean": pytest.approx(0.1), "ci95": [pytest.approx(0.1)] * 2, "n": 8,
                                             "method": "constant"}
    assert rag["intervals"]["token_f1"]["method"] == "bootstrap-bca"
    closed = report["summary"]["closed_book"]["open"]
    assert closed["answer_match_ci95"] == [pytest.approx(wilson_interval(3, 3)[0]), 1.0]
    assert report["summary"]["closed_book"]["gold"]["answer_match_ci95"] is None  # no record: no interval
    assert report["summary"]["closed_book"]["gold"]["intervals"]["answer_match"]["method"] == "none"
    paired = report["paired"]
    assert paired["baseline"] == "closed_book" and "for each metric and context type" in paired["holm_family"]
    match = [c for c in paired["comparisons"] if c["metric"] == "answer_match"]
    assert len(match) == 1
    test = match[0]
    assert {k: test[k] for k in ("pipeline", "baseline", "context_type", "n", "both", "only_pipeline", "only_baseline",
                                 "neither", "test")} == {
        "pipeline": "rag", "baseline": "closed_book", "context_type": "open", "n": 3, "both": 2, "only_pipeline": 0,
        "only_baseline": 1, "neither": 0, "test": "exact McNemar"}
    assert test["p_value"] == exact_mcnemar(0, 1) == 1.0 and test["p_holm"] == 1.0  # a family of one
    assert test["difference"]["mean"] == pytest.approx(-1 / 3)
    # MDE: one discordant pair in 3, sd = sqrt(1/3); (1.95996 + 0.84162) * sqrt(1/3) / sqrt(3) = 2.80158 / 3
    assert test["mde"] == pytest.approx(2.80158 / 3, abs=1e-5)
    assert test["verdict"] == "no detectable difference at n = 3 (could detect ≥ 0.93)"
    write_report(report, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    low, high = wilson_interval(7, 8)
    assert f"| 0.875 [{low:.2f}, {high:.2f}] |" in markdown and "Each cell: mean [95% interval]" in markdown
    assert "## Paired comparison with the baseline `closed_book`" in markdown and "### answer_match" in markdown
    assert "| rag | closed_book | open | answer_match | 3 | -0.333 [" in markdown
    assert "| 0 / 1 | exact McNemar |" in markdown
    assert "exact McNemar" in (tmp_path / "report.html").read_text()
    saved = json.loads((tmp_path / "report.json").read_text())
    saved_match = [c for c in saved["paired"]["comparisons"] if c["metric"] == "answer_match"]
    assert saved_match[0]["only_baseline"] == 1 and saved["statistics"]["seed"] == 0


def test_exact_match_column_is_left_out_of_the_tables_when_the_reader_answers_in_sentences(tmp_path):
    from icr2_components.evaluation.reports.rendering import paired_rows, summary_rows

    sentences = [
        record(p, f"q{i}", "The capital of France is the city of Paris, on the Seine.", ["Paris"], ["p1"], ["p1"])
        for p in ("rag", "other")
        for i in range(4)
    ]
    report = build_report(sentences, [spec("rag"), spec("other")], ["open"], seed=0)
    assert "exact_match" in report["omitted_columns"] and "0 of 8" in report["omitted_columns"]["exact_match"]
    assert report["summary"]["rag"]["open"]["exact_match"] is not None  # still in the JSON
    header, _ = summary_rows(report)
    assert "exact_match" not in header and "answer_match" in header
    assert all(row[3] != "exact_match" for row in paired_rows(report)[1])
    files = write_report(report, tmp_path)
    markdown = Path(files["markdown"]).read_text()
    assert "Left out of the tables: exact_match" in markdown and "### exact_match" not in markdown

    short = [record(p, f"q{i}", "Paris", ["Paris"], ["p1"], ["p1"]) for p in ("rag", "other") for i in range(4)]
    report = build_report(short, [spec("rag"), spec("other")], ["open"], seed=0)
    assert report["omitted_columns"] == {}
    assert "exact_match" in summary_rows(report)[0]
