"""``icr2 reproduce icr2-benchmark``: ICR2's Table 2 comparison and its confounding-ratio effect, end to end on the
bundled reader in process and through the real llama.cpp server, at one or two held-out questions and a 300-token
corpus (the registered run, 100 questions at 1,000 and 4,000 tokens, takes hours on 2 cores).

Each run asserts what the report must hold: every condition's cell with its n and Wilson interval, scored by the
answer-match rule on the cached replies; the paired rows (CiC against closed-book and oracle, p = 1 against p = 0)
on the same questions; the corpora as built (gold among retrieved confounders at p = 1, among random passages at
p = 0, from the evaluation pool of the NQ sample); a budget the model cannot take refused with the count; the
paper's Table 2 beside, its models named; the plot opened by the HTML; a second run answering nothing (resume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.experiments.icr2_benchmark import RETRIEVERS
from icr2_components.evaluation.metrics.answer_match import answer_match

REPO = Path(__file__).resolve().parents[1]


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _check_run(report: dict, out: Path, questions: int) -> None:
    """What every run's report must hold, checked against the files it wrote."""
    cells = {c["condition"]: c for c in report["cells"]}
    assert set(cells) == {"300tok@p0", "300tok@p1"}
    assert report["questions"]["complete"] == questions
    assert all(c["n"] == questions and c["ci95"] is not None for c in cells.values())
    # the evaluation pool only: NQ-sample positions 2000 and later
    assert all(int(q.rsplit("-", 1)[1]) >= 2000 for q in report["questions"]["ids"])
    # each cell is the answer-match rule applied to the cached replies
    answers = [json.loads(line) for line in cache_lines(out / "compare" / "answers.jsonl.gz") if line.strip()]
    for name, cell in cells.items():
        mine = [r for r in answers if r["question_id"].endswith(f"|{name}")]
        assert len(mine) == questions
        assert cell["correct"] == sum(answer_match(r["answer"] or "", r["answers"]) for r in mine)
    # the corpora: gold among retrieved confounders (p = 1) or random passages (p = 0), within the budget
    for name, allowed in (("300tok@p1", {"gold", *RETRIEVERS}), ("300tok@p0", {"gold", "random"})):
        records = _records(out / "data" / f"{name}.jsonl")
        assert len(records) == questions
        for record in records:
            origins = {c["origin"] for c in record["context"]}
            assert "gold" in origins and origins <= allowed and record["gold_passage_ids"]
            assert record["budget"] == {"unit": "tokens", "value": 300}
            confounders = [c for c in record["context"] if c["origin"] != "gold"]
            assert not any(answer_match(c["text"], record["answers"]) for c in confounders if name.endswith("p1"))
        assert any(c["origin"] != "gold" for r in records for c in r["context"])  # some confounder fits 300 tokens
    # the paired rows, on the same questions
    versus = report["versus_references"]["rows"]
    assert {r["condition"] for r in versus["closed_book"]} == set(cells) == {r["condition"] for r in versus["oracle"]}
    assert all(r["n"] == questions and 0 <= r["p_holm"] <= 1 for rows in versus.values() for r in rows)
    confounding = report["confounding"]["rows"]
    assert [(r["condition"], r["against"], r["n"]) for r in confounding] == [("300tok@p1", "300tok@p0", questions)]
    assert confounding[0]["difference"] == (cells["300tok@p1"]["correct"] - cells["300tok@p0"]["correct"]) / questions
    assert set(report["references"]) == {"closed_book", "oracle"}
    assert {e["condition"] for e in report["exact_match"]} == {"300tok@p0", "300tok@p1", "closed_book", "oracle"}
    assert report["run"]["at_registered_size"] is False  # a budget of one's own is not the registered protocol
    html = (out / "report.html").read_text()
    plot = Path(report["files"]["plot"])
    assert plot.is_file() and plot.stat().st_size > 10_000 and f"<img src='{plot.name}'" in html
    assert "GPT-4-turbo (paper)" in html and "Table 7" in html


@pytest.mark.unit
def test_the_protocol_is_table_2_at_two_budgets_with_the_papers_figures():
    protocol = get_experiment("icr2-benchmark").describe()
    assert protocol["conditions"] == ["1000tok@p0", "4000tok@p0", "1000tok@p1", "4000tok@p1"]
    assert protocol["registered_size"] == 100
    assert [v["name"] for v in protocol["references"]] == ["closed_book", "oracle"]
    figures = {(f["model"], f["condition"]): f for f in protocol["paper_figures"]}
    # Table 2, NQ: GPT-4-turbo's vanilla RAG 0.85 on LOFT, 0.67 on ICR2; Qwen-2-1.5B's oracle 0.77 on ICR2
    assert figures[("GPT-4-turbo", "cic_random")]["value"] == 0.85
    assert figures[("GPT-4-turbo", "cic_confounders")]["value"] == 0.67
    assert figures[("Qwen-2-1.5B-32K", "oracle")]["value"] == 0.77
    assert figures[("Qwen-2-1.5B-32K", "oracle")]["source"] == "Table 2 (ICR2 NQ column, 32K tokens)"
    assert {"budgets", "ratios"} <= set(protocol["options"])


def test_bad_budgets_and_ratios_are_refused_before_any_model_runs(tmp_path, capsys):
    for setting in ("budgets=0", "budgets=many", "ratios=1.5"):
        assert main(["reproduce", "icr2-benchmark", "--set", setting, "--out", str(tmp_path / "x"),
                     "--no-progress"]) == 1
        assert setting.split("=")[0] in capsys.readouterr().err
    assert not (tmp_path / "x" / "compare").exists()


@pytest.mark.slow  # 2 questions x (2 corpora of 300 tokens + closed-book + oracle): ~40 s on 2 idle cores
def test_icr2_benchmark_in_process_from_outside_the_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no file of the checkout is read: the package and the shared data only
    out = tmp_path / "icr2"
    argv = ["reproduce", "icr2-benchmark", "--limit", "2", "--set", "budgets=300,9000", "--out", str(out),
            "--max-new-tokens", "12", "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    _check_run(report, out, questions=2)
    # SmolLM2 takes 8,192 tokens: a 9,000-token corpus is refused, with the count, and nothing is built for it
    refused = {r["condition"]: r["reason"] for r in report["refused"]}
    assert set(refused) == {"9000tok@p0", "9000tok@p1"} and "8192 context" in refused["9000tok@p1"]
    assert not (out / "data" / "9000tok@p1.jsonl").exists()
    assert report["run"]["counters"]["conditions"]["model_runs"] == 4
    assert "confounding effect" in printed and "not at the registered size" in printed
    # run again: every answer comes from the cache, the same numbers
    assert main(argv) == 0
    again = _report(out)
    assert again["run"]["counters"]["conditions"]["model_runs"] == 0
    assert again["run"]["counters"]["references"]["model_runs"] == 0
    assert again["cells"] == report["cells"] and again["confounding"] == report["confounding"]


@pytest.mark.llama_server
def test_icr2_benchmark_through_the_llama_cpp_server(llama_cpp_backend, tmp_path):
    out = tmp_path / "icr2"
    assert main(["reproduce", "icr2-benchmark", "--backend", llama_cpp_backend, "--limit", "1", "--set", "budgets=300",
                 "--out", str(out), "--max-new-tokens", "12", "--no-progress"]) == 0
    report = _report(out)
    assert "smollm2-135m-instruct at http://127.0.0.1:" in report["run"]["backend"]  # the served model answered
    _check_run(report, out, questions=1)
    assert report["run"]["counters"]["conditions"]["model_runs"] == 2
    assert report["run"]["counters"]["conditions"]["errors"] == 0
