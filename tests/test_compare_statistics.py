"""The compare report's statistics end to end on synthetic answer records (this tests the report's rendering and
numbers, not a model: the answers are chosen so that every number can be worked out by hand), and ``--baseline``."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy.stats import norm

from icr2_components.cli import main
from icr2_components.evaluation.reports.compare_report import TABLE_COLUMNS, build_report, resolve_baseline
from icr2_components.evaluation.reports.rendering import write_report
from icr2_components.evaluation.statistics.proportions import wilson_interval

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = 30
# questions right (q0 .. q{k-1}) per pipeline, answer match on the open context type
RIGHT = {"vanilla_rag": 6, "reranked": 18, "query_aware": 8, "oracle_gold": 24}


def synthetic_records():
    records = []
    for offset, (name, right) in enumerate(RIGHT.items()):
        oracle = name == "oracle_gold"
        for i in range(QUESTIONS):
            shown = [f"g{i}"] if oracle else ([f"g{i}", "x"] if i % 2 == 0 else ["x", f"g{i}"])
            records.append({
                "key": f"{name}|q{i}|open", "pipeline": name, "question_id": f"q{i}", "context_type": "open",
                "answer": "Paris" if i < right else "London", "answers": ["Paris"], "shown_ids": shown,
                "gold_ids": [f"g{i}"], "reads_context": True, "selects_passages": not oracle,
                # every pipeline is slower than the last by 0.5 s on every question (a constant difference)
                "latency_s": 0.1 + (i % 7) * 0.05 + 0.5 * offset, "prompt_tokens": 100 + 10 * (i % 5) + 50 * offset})
    return records


def synthetic_specs():
    return [SimpleNamespace(name=name, context_input="prompt.documents",
                            data={"metadata": {"technique": "oracle" if name == "oracle_gold" else name}})
            for name in RIGHT]


@pytest.fixture(scope="module")
def report():
    return build_report(synthetic_records(), synthetic_specs(), ["open"], seed=11)


def test_every_summary_number_has_an_interval(report):
    for name, right in RIGHT.items():
        row = report["summary"][name]["open"]
        assert set(row["intervals"]) == set(TABLE_COLUMNS)
        assert row["intervals"]["answer_match"] == {"mean": pytest.approx(right / QUESTIONS),
                                                    "ci95": pytest.approx(list(wilson_interval(right, QUESTIONS))),
                                                    "n": QUESTIONS, "method": "wilson"}
        for metric in ("latency_s", "prompt_tokens"):
            interval = row["intervals"][metric]
            assert interval["method"] == "bootstrap-bca" and interval["n"] == QUESTIONS
            assert interval["ci95"][0] < row[metric] < interval["ci95"][1]
        assert row["intervals"]["bcu"]["method"] == "none"  # no CUB context type in this run
    recall = report["summary"]["vanilla_rag"]["open"]["intervals"]["in_context_recall"]
    assert recall == {"mean": 1.0, "ci95": [pytest.approx(30 / (30 + 1.959963984540054**2)), 1.0], "n": 30,
                      "method": "wilson"}
    assert report["summary"]["oracle_gold"]["open"]["intervals"]["in_context_recall"]["method"] == "none"
    assert report["statistics"]["seed"] == 11 and report["statistics"]["confidence"] == 0.95


def test_paired_section_against_the_first_pipeline_with_holm_and_mde(report):
    paired = report["paired"]
    assert paired["baseline"] == "vanilla_rag"  # the default: the first pipeline
    match = {c["pipeline"]: c for c in paired["comparisons"] if c["metric"] == "answer_match"}
    assert list(match) == ["reranked", "query_aware", "oracle_gold"]
    # discordant pairs, all for the pipeline: reranked 12, query_aware 2, oracle 18; exact p = 2 / 2^b
    p = {"reranked": 2 / 2**12, "query_aware": 2 / 2**2, "oracle_gold": 2 / 2**18}
    for name, value in p.items():
        assert match[name]["p_value"] == pytest.approx(value)
        assert match[name]["family_size"] == 3 and match[name]["mde_alpha"] == pytest.approx(0.05 / 3)
    # Holm over the family of 3: oracle 3 * p, reranked 2 * p (above the oracle's), query_aware 1 * p
    assert match["oracle_gold"]["p_holm"] == pytest.approx(3 * p["oracle_gold"])
    assert match["reranked"]["p_holm"] == pytest.approx(2 * p["reranked"])
    assert match["query_aware"]["p_holm"] == pytest.approx(0.5)
    assert match["reranked"]["verdict"] == "better" and match["oracle_gold"]["verdict"] == "better"
    # query_aware: 2 discordant pairs in 30, MDE = (z(1 - 0.05/6) + z(0.8)) * sqrt(2/30) / sqrt(30) = 0.1525
    mde = (norm.ppf(1 - 0.05 / 6) + norm.ppf(0.8)) * (2 / 30) ** 0.5 / 30**0.5
    assert match["query_aware"]["mde"] == pytest.approx(mde) and round(mde, 2) == 0.15
    assert match["query_aware"]["verdict"] == "no detectable difference at n = 30 (could detect ≥ 0.15)"
    assert match["reranked"]["difference"]["mean"] == pytest.approx(12 / 30)
    assert match["reranked"]["difference"]["ci95"][0] > 0
    # latency: every question 0.5 s slower per pipeline -> a constant difference, a cost that is "higher"
    latency = next(c for c in paired["comparisons"] if c["metric"] == "latency_s" and c["pipeline"] == "reranked")
    assert latency["difference"] == {"mean": pytest.approx(0.5), "ci95": [pytest.approx(0.5)] * 2, "n": 30,
                                     "method": "constant"}
    assert latency["test"] == "sign-flip permutation" and latency["verdict"] == "higher"


def test_gap_closed_toward_the_oracle_is_found_by_technique(report):
    gap = report["paired"]["gap_closed"]
    assert gap["oracle"] == "oracle_gold" and gap["context_type"] == "open"
    results = {r["pipeline"]: r for r in gap["results"]}
    assert set(results) == {"reranked", "query_aware"}
    # (18 - 6) / (24 - 6) = 2/3, significant after Holm; (8 - 6) / 18 = 1/9, not significant; no target is judged
    assert results["reranked"]["mean"] == pytest.approx(2 / 3) and results["reranked"]["significant_after_holm"] is True
    low, high = results["reranked"]["ci95"]
    assert low < 2 / 3 < high
    assert results["query_aware"]["mean"] == pytest.approx(1 / 9) and "target_met" not in results["query_aware"]
    assert results["query_aware"]["significant_after_holm"] is False


def test_report_files_show_the_intervals_and_the_paired_section(report, tmp_path):
    write_report(report, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    low, high = wilson_interval(6, 30)
    # exact match and answer match: 6 of 30 ("Paris" is the gold answer verbatim)
    assert f"| vanilla_rag | open | 30 | 0.200 [{low:.2f}, {high:.2f}] | 0.200 [{low:.2f}, {high:.2f}] |" in markdown
    assert "## Paired comparison with the baseline `vanilla_rag`" in markdown
    assert "| reranked | vanilla_rag | open | answer_match | 30 | +0.400 [" in markdown
    assert "| 12 / 0 | exact McNemar | 0.0005 | 0.0010 | " in markdown
    assert "no detectable difference at n = 30 (could detect ≥ 0.15) |" in markdown
    assert "### Gap closed toward the oracle" in markdown and "| reranked | 30 | 0.67 [" in markdown
    assert "| yes |" in markdown and "| query_aware | 30 | 0.11 [" in markdown
    assert "target met" not in markdown and "Target:" not in markdown  # no target of the library's in a user's report
    assert "Pipelines are listed in the order given, not ranked." in markdown
    assert "- Confidence 0.95; seed 11;" in markdown
    assert "| vanilla_rag | answer_match | 1 vs 2-3 |" in markdown  # the curve's shape test
    page = (tmp_path / "report.html").read_text()
    assert "Gap closed toward the oracle" in page and "could detect ≥ 0.15" in page and "seed 11" in page
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["paired"]["comparisons"] == json.loads(json.dumps(report["paired"]["comparisons"]))
    assert saved["summary"]["reranked"]["open"]["intervals"]["answer_match"]["method"] == "wilson"
    assert (tmp_path / "position_curves.png").stat().st_size > 0


def test_baseline_is_chosen_by_name_and_a_wrong_name_lists_the_pipelines():
    records, specs = synthetic_records(), synthetic_specs()
    chosen = build_report(records, specs, ["open"], baseline="reranked")
    assert chosen["paired"]["baseline"] == "reranked"
    assert {c["pipeline"] for c in chosen["paired"]["comparisons"]} == {"vanilla_rag", "query_aware", "oracle_gold"}
    with pytest.raises(ValueError, match=r"--baseline 'vanila_rag' is not a pipeline of this run; the pipelines are: "
                                         r"vanilla_rag, reranked, query_aware, oracle_gold\."):
        build_report(records, specs, ["open"], baseline="vanila_rag")
    assert resolve_baseline("cad", ["vanilla_rag", "cad.tuned"]) == "cad.tuned"  # --tune renames the pipelines
    assert resolve_baseline(None, ["a", "b"]) == "a"


def test_cli_refuses_an_unknown_baseline_before_running_a_question(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    code = main(["compare", "--pipelines", "pipelines/closed_book.yaml", "pipelines/oracle.yaml", "--baseline",
                 "vanilla_rag", "--out", str(out), "--no-progress"])
    assert code == 1
    assert capsys.readouterr().err.strip() == ("icr2 compare: error: --baseline 'vanilla_rag' is not a pipeline of "
                                               "this run; the pipelines are: closed_book, oracle.")
    assert not (out / "answers.jsonl.gz").exists() and not (out / "answers.jsonl").exists()
