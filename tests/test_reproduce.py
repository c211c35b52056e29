"""``icr2 reproduce``: the registered experiments end to end on the bundled reader in process and through the real
llama.cpp server, at a few questions and conditions (the registered sizes take hours; docs/benchmarks/reproduce.md
lists them).

Each run asserts what the report must hold: the cells of the conditions asked with their n and Wilson interval, the
paper's figures beside them with its model named, the refusals with the reason, the plot opened by the HTML, and a
second run answering nothing (compare's answer cache: resume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.experiments.protocol import experiment_names
from icr2_components.evaluation.experiments.runner import run_experiment

REPO = Path(__file__).resolve().parents[1]


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _check_files(report: dict, out: Path) -> None:
    html = (out / "report.html").read_text()
    plot = Path(report["files"]["plot"])
    assert plot.is_file() and plot.stat().st_size > 10_000
    assert f"<img src='{plot.name}'" in html  # the HTML opens the plot
    assert f"![{report['experiment']['figure']}]({plot.name})" in (out / "report.md").read_text()
    assert report["files"]["explore"] == str(out / "explore.html") and (out / "plotly.min.js").is_file()


def test_the_list_names_every_experiment_with_its_protocol(capsys):
    assert {"kv-retrieval", "lost-in-the-middle"} <= set(experiment_names())
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "kv-retrieval:" in listed and "lost-in-the-middle:" in listed and "75keys@25" in listed
    protocol = get_experiment("lost-in-the-middle").describe()
    assert protocol["registered_size"] == 200 and "20docs@10" in protocol["conditions"]
    # the paper's figures are the printed ones, the model named: GPT-3.5-Turbo (16K) at 20 documents, table 6
    figure = next(f for f in protocol["paper_figures"]
                  if f["model"] == "GPT-3.5-Turbo (16K)" and f["condition"] == "20docs@10")
    assert figure["value"] == 0.541 and figure["source"] == "Table 6"


def test_bad_names_and_conditions_are_refused_with_what_there_is(capsys):
    assert main(["reproduce", "no-such-paper"]) == 1
    assert "kv-retrieval" in capsys.readouterr().err
    assert main(["reproduce", "kv-retrieval", "--conditions", "76keys@*"]) == 1
    assert "75keys@1" in capsys.readouterr().err
    assert main(["reproduce"]) == 1
    assert "--list" in capsys.readouterr().err


@pytest.mark.slow  # two 5,400-token prompts in process: about a minute on 2 idle cores
def test_kv_retrieval_in_process_refuses_what_does_not_fit_and_resumes(tmp_path, capsys):
    out = tmp_path / "kv"
    argv = ["reproduce", "kv-retrieval", "--limit", "1", "--conditions", "75keys@1,140keys@70,300keys@1",
            "--out", str(out), "--max-new-tokens", "4", "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    cells = {(c["condition"], c["variant"]): c for c in report["cells"]}
    assert set(cells) == {("75keys@1", "kv_retrieval"), ("75keys@1", "kv_retrieval_query_aware")}
    assert all(c["n"] == 1 and c["ci95"] is not None for c in cells.values())
    # SmolLM2 takes 8192 tokens: 140 and 300 pairs do not fit, and the reason counts them
    refused = {r["condition"]: r["reason"] for r in report["refused"]}
    assert set(refused) == {"140keys@70", "300keys@1"}
    assert "tokens by the model's tokenizer" in refused["140keys@70"] and "8192 context" in refused["300keys@1"]
    assert "140keys@70" in printed and "not at the registered size" in printed
    # the prompt the reader got is figure 7's, the pairs in the released order with the asked one first
    data = [json.loads(line) for line in (out / "data" / "conditions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in data] == ["kv-0001|75keys@1"] and data[0]["gold_passage_ids"] == ["KV001"]
    assert data[0]["context"][0]["title"] == data[0]["query"]
    assert report["run"]["counters"]["conditions"]["model_runs"] == 2
    _check_files(report, out)
    assert "Figure 10 is a plot" in (out / "report.md").read_text()
    # run again: every answer comes from the cache
    assert main(argv) == 0
    assert _report(out)["run"]["counters"]["conditions"]["model_runs"] == 0


@pytest.mark.unit
def test_each_condition_is_tested_against_the_references_on_hand_made_scores(tmp_path):
    from icr2_components.evaluation.experiments.protocol import PreparedData
    from icr2_components.evaluation.experiments.report import build_report, curve_tables

    experiment = get_experiment("lost-in-the-middle")
    conditions = [c for c in experiment.conditions() if c.name in ("10docs@1", "10docs@10")]
    ids = [f"q{i}" for i in range(12)]
    # gold first: right on q0-q1; gold last: right on q0-q9; closed-book: q0-q2; the oracle: every question but q11
    right = {"10docs@1": set(ids[:2]), "10docs@10": set(ids[:10])}
    scores = {v.name: {c: {q: q in right[c] for q in ids} for c in right} for v in experiment.variants()}
    references = {"closed_book": {q: q in ids[:3] for q in ids}, "oracle": {q: q != "q11" for q in ids[:11]}}
    report = build_report(experiment, conditions, scores, references, PreparedData(tmp_path / "c.jsonl", ids))
    families = {(f["reference"], f["variant"]): f for f in report["conditions_vs_references"]}
    assert len(families) == 4  # 2 references x 2 variants
    closed = families[("closed_book", "multi_document_qa")]
    first, last = closed["rows"]
    assert closed["n"] == 12 and (first["only_condition"], first["only_reference"]) == (0, 1)
    assert (last["only_condition"], last["only_reference"]) == (7, 0)
    assert last["difference"] == pytest.approx(7 / 12) and last["p_value"] == pytest.approx(2 / 2 ** 7)
    assert last["p_holm"] == pytest.approx(min(1.0, 2 * last["p_value"]))  # the smaller of 2 p values, doubled
    oracle = families[("oracle", "multi_document_qa")]  # q11 unanswered by the oracle: paired on the other 11
    assert oracle["n"] == 11 and oracle["rows"][0]["only_reference"] == 9 and oracle["rows"][1]["only_reference"] == 1
    titles = [title for title, *_ in curve_tables(report)]
    assert "multi_document_qa against closed_book (paired)" in titles


@pytest.mark.slow  # drawing the distractors twice (the sample index, MiniLM) and 6 answers of ~1,300-token prompts
def test_lost_in_the_middle_in_process_beside_tables_5_to_7(tmp_path):
    out = tmp_path / "litm"
    # a run in parts: one position first, then two, into the same folder; the second answers only the new one
    run_experiment("lost-in-the-middle", limit=1, conditions="10docs@1", out_dir=out, max_new_tokens=8,
                   progress=False)
    report = run_experiment("lost-in-the-middle", limit=1, conditions="10docs@1,10docs@10", out_dir=out,
                            max_new_tokens=8, progress=False)
    assert report["run"]["counters"]["conditions"] == {**report["run"]["counters"]["conditions"], "model_runs": 2,
                                                       "cached": 2, "stale_context": 0}
    assert report["run"]["counters"]["references"]["model_runs"] == 0
    assert report["questions"] == {**report["questions"], "drawn": 1, "complete": 1}
    # the registered draw (29 distractors) on a subset of the conditions too, so its answers are the whole run's
    assert "fewer than 29 distractors" in report["run"]["drawn"]["skipped"]
    assert [c["condition"] for c in report["cells"]] == ["10docs@1", "10docs@1", "10docs@10", "10docs@10"]
    data = [json.loads(line) for line in (out / "data" / "conditions.jsonl").read_text().splitlines()]
    assert len(data) == 2 and all(len(r["context"]) == 10 for r in data)
    # the gold passage at the condition's position, the distractors in the same order around it
    first, last = data[0], data[1]
    assert first["gold_passage_ids"] == ["PSG001"] and last["gold_passage_ids"] == ["PSG010"]
    assert first["context"][0]["doc_id"] == last["context"][9]["doc_id"]
    assert [c["doc_id"] for c in first["context"][1:]] == [c["doc_id"] for c in last["context"][:9]]
    assert set(report["references"]) == {"closed_book", "oracle"}
    assert all(cell["n"] == 1 for cell in report["references"].values())
    curve = next(c for c in report["curves"] if c["variant"] == "multi_document_qa")
    assert curve["positions"] == [1, 10] and curve["test"]["n"] == 1
    assert report["variants_vs_first"][0]["variant"] == "multi_document_qa_query_aware"
    markdown = (out / "report.md").read_text()
    assert "GPT-3.5-Turbo (16K) (paper)" in markdown and "| 0.769 |" in markdown  # table 5, gold first
    _check_files(report, out)


@pytest.mark.llama_server
def test_kv_retrieval_through_the_llama_cpp_server(llama_cpp_backend, tmp_path):
    out = tmp_path / "kv"
    assert main(["reproduce", "kv-retrieval", "--backend", llama_cpp_backend, "--limit", "1", "--conditions",
                 "75keys@1,140keys@1", "--out", str(out), "--max-new-tokens", "24", "--no-progress",
                 # the python server answers one request at a time: 4 long prompts queued at once outwait its timeout
                 "--concurrency", "1"]) == 0
    report = _report(out)
    assert "smollm2-135m-instruct at http://127.0.0.1:" in report["run"]["backend"]  # the served model
    assert {c["condition"] for c in report["cells"]} == {"75keys@1"}
    # the server's tokenizer counts the 140-pair prompt past its 8192-token context
    assert [r["condition"] for r in report["refused"]] == ["140keys@1"]
    assert report["run"]["counters"]["conditions"]["model_runs"] == 2  # plain and query-aware
    _check_files(report, out)


@pytest.mark.llama_server
def test_lost_in_the_middle_through_the_llama_cpp_server(llama_cpp_backend, tmp_path):
    out = tmp_path / "litm"
    assert main(["reproduce", "lost-in-the-middle", "--backend", llama_cpp_backend, "--limit", "1", "--conditions",
                 "10docs@1,10docs@10", "--out", str(out), "--max-new-tokens", "16", "--no-progress",
                 "--concurrency", "2"]) == 0
    report = _report(out)
    assert report["questions"]["complete"] == 1 and len(report["cells"]) == 4
    assert report["run"]["counters"]["conditions"]["model_runs"] == 4  # 2 positions x plain and query-aware
    assert report["references"]["oracle"]["n"] == 1
    _check_files(report, out)
