"""``icr2 reproduce cub``: CUB's techniques over gold, conflicting and irrelevant contexts, end to end on the bundled
reader in process and through the real llama.cpp server, at one question (the registered size, 100 questions x 9
pipelines x 3 contexts, takes hours on 2 cores; docs/benchmarks/reproduce.md).

Each run asserts what the report must hold: BCU per technique and context type with n and its interval,
faithfulness and robustness with theirs, each technique paired against regular decoding, the paper's Table 3
points with its models named, the plot opened by the HTML, and (served) the techniques that need the model's
logits or attention refused with the reason instead of dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.experiments.cub import registered_question_ids

REPO = Path(__file__).resolve().parents[1]
WHITE_BOX = {"cad", "acd", "coiecd", "ph3_context", "ph3_memory"}


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _check_files(report: dict, out: Path) -> None:
    plot = Path(report["files"]["plot"])
    assert plot.is_file() and plot.stat().st_size > 10_000
    assert f"<img src='{plot.name}'" in (out / "report.html").read_text()  # the HTML opens the plot
    markdown = (out / "report.md").read_text()
    assert f"]({plot.name})" in markdown
    # the paper's Table 3 beside: NQ, (Qwen2.5-32B-Instruct, ACD) 67.66 faithfulness, 57.35 robustness
    assert "| NQ | Qwen2.5-32B-Instruct | ACD | 0.6766 | 0.5735 |" in markdown


def _check_cells(report: dict, pipelines: list[str]) -> None:
    assert list(report["techniques"]) == [*pipelines, "closed_book"]
    for name in report["techniques"]:
        entry = report["techniques"][name]
        for kind in ("gold", "conflicting", "irrelevant"):
            cell = entry["bcu"][kind]
            assert cell["n"] == 1 and cell["method"] == "wilson" and cell["ci95"][0] <= cell["mean"] <= cell["ci95"][1]
        assert entry["faithfulness"] == (entry["bcu"]["gold"]["mean"] + entry["bcu"]["conflicting"]["mean"]) / 2
        assert entry["robustness"] == entry["bcu"]["irrelevant"]["mean"]
    # closed-book's answer is the memory target: robust by construction, the reference, not on the front
    assert report["techniques"]["closed_book"]["robustness"] == 1.0
    assert "closed_book" not in report["pareto_front"] and set(report["pareto_front"]) <= set(pipelines)
    paired = {(r["technique"], r["measure"]) for r in report["paired"]}
    assert paired == {(p, m) for p in pipelines[1:] for m in ("faithfulness", "gold", "conflicting", "irrelevant")}
    assert all(r["baseline"] == "vanilla_rag" and r["n"] == 1 and "p_holm" in r for r in report["paired"])


def test_the_protocol_is_the_held_out_matrix_with_table_3(capsys):
    protocol = get_experiment("cub").describe()
    assert protocol["conditions"] == ["gold", "conflicting", "irrelevant"]
    assert [v["name"] for v in protocol["variants"]][:3] == ["vanilla_rag", "cmt_prompting", "cmt_multi_agent"]
    assert len(protocol["variants"]) == 8 and protocol["references"][0]["name"] == "closed_book"
    figure = next(f for f in protocol["paper_figures"] if f["condition"] == "NQ: Multi-agent, robustness")
    assert figure["model"] == "Qwen2.5-7B-Instruct" and figure["value"] == pytest.approx(0.7332)
    assert figure["source"].startswith("Table 3")
    # the registered questions are the committed CUB matrix's (bench/results/ab_cub), shipped in the package
    ids = registered_question_ids()
    committed = [line for line in (REPO / "bench/data/heldout_nq_ids_first100.txt").read_text().splitlines()
                 if line and not line.startswith("#")]
    assert len(ids) == 100 and ids == committed
    # a technique the preset does not have is refused, naming those it has
    assert main(["reproduce", "cub", "--set", "techniques=cad,lookback", "--limit", "1"]) == 1
    error = capsys.readouterr().err
    assert "lookback" in error and "ph3_memory" in error


@pytest.mark.slow  # 7 answers (3 with CAD's two passes) of the bundled reader, run twice (resume): ~1-2 min idle
def test_cub_in_process_pairs_cad_against_regular_and_resumes(tmp_path, capsys):
    out = tmp_path / "cub"
    argv = ["reproduce", "cub", "--limit", "1", "--set", "techniques=cad", "--max-new-tokens", "8", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    _check_cells(report, ["vanilla_rag", "cmt_cad"])
    assert report["questions"] == {**report["questions"], "drawn": 1, "complete": 1}
    assert report["refused"] == [] and not report["run"]["at_registered_size"]
    assert report["run"]["compare_max_new_tokens"] == 8
    # the answers are compare's: its cache holds every pipeline under every context type of the question
    records = [json.loads(line) for line in cache_lines(out / "compare" / "answers.jsonl.gz")]
    assert {(r["pipeline"], r["context_type"]) for r in records} == {
        (p, t) for p in ("vanilla_rag", "cmt_cad", "closed_book") for t in ("gold", "conflicting", "irrelevant")}
    assert {r["question_id"] for r in records} == {registered_question_ids()[0]}
    conflicting = next(r for r in records if r["context_type"] == "conflicting")
    assert conflicting["conflicting_answer"]  # the substitute BCU scores against
    assert "each technique against regular decoding" in printed and "not at the registered size" in printed
    _check_files(report, out)
    # run again: every answer comes from the cache
    assert main(argv) == 0
    assert _report(out)["run"]["counters"]["model_runs"] == 0


@pytest.mark.llama_server
def test_cub_through_the_llama_cpp_server_refuses_the_white_box_techniques(llama_cpp_backend, tmp_path, capsys):
    out = tmp_path / "cub"
    assert main(["reproduce", "cub", "--backend", llama_cpp_backend, "--limit", "1", "--max-new-tokens", "8", "--out",
                 str(out), "--no-progress", "--concurrency", "2"]) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    assert "smollm2-135m-instruct at http://127.0.0.1:" in report["run"]["backend"]  # the served model
    _check_cells(report, ["vanilla_rag", "cmt_prompting", "cmt_multi_agent"])
    # the techniques needing logits or attention are refused with the backend's reason, not dropped
    refused = {r["technique"]: r["reason"] for r in report["refused"]}
    assert set(refused) == WHITE_BOX
    assert refused["cad"].startswith("component 'reader' (ContextAwareDecodingReader)")
    assert "needs the full logits" in refused["acd"] and "needs the weights" in refused["ph3_context"]
    assert "techniques refused" in (out / "report.md").read_text() and "coiecd" in printed
    # 3 pipelines x 3 contexts and closed-book once (its answer reused for every context)
    assert report["run"]["counters"]["model_runs"] == 10
    _check_files(report, out)


@pytest.mark.unit
def test_the_plot_zooms_to_the_techniques_of_the_committed_run(tmp_path):
    """The registered run's points lie within 0.2 x 0.07 near the axes of the whole square: the middle panel zooms
    to every technique's point and 95% interval, leaving closed-book (F 0.04, R 1.00) out, so the front is read."""
    import matplotlib.image

    from icr2_components.evaluation.experiments.cub import MEMORY, _techniques_extent, plot_cub

    report = json.loads((REPO / "bench/results/reproduce/cub/report.json").read_text())
    (x_low, x_high), (y_low, y_high) = _techniques_extent(report)
    for name, entry in report["techniques"].items():
        inside = (x_low <= entry["faithfulness"] <= x_high and y_low <= entry["robustness"] <= y_high)
        assert inside == (name != MEMORY), name
        if name != MEMORY:
            for key, (low, high) in (("faithfulness", (x_low, x_high)), ("robustness", (y_low, y_high))):
                interval = entry["intervals"][key]["ci95"]
                assert low <= interval[0] and interval[1] <= high, (name, key)
    assert y_high - y_low < 0.3  # the whole square's 1.1 would squeeze the front onto the axis
    path = plot_cub(report, tmp_path / "cub.png")
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width > 2 * height  # three panels side by side
