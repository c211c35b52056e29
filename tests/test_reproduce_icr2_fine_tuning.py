"""``icr2 reproduce icr2-fine-tuning``: ICR2 Table 3's arms as data, the committed answers reported through the preset
with today's figures, and end-to-end runs at one question on the bundled reader in process (an arm on a committed
LoRA adapter beside the untrained reader, then resumed from the cache) and through the real llama.cpp server (the
arms that need weights refused with the reason, the others answered)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.experiments import get_experiment
from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import (
    ARMS,
    CLAIM_ARMS,
    PAIRS,
    arm_by_name,
    find_weights,
    recipe_file,
    registered_ids,
)

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "bench" / "results" / "icr2_table3"


def _ids(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _check_files(report: dict, out: Path) -> None:
    plot = Path(report["files"]["plot"])
    assert plot.is_file() and plot.stat().st_size > 10_000
    html = (out / "report.html").read_text()
    assert f"<img src='{plot.name}'" in html  # the HTML opens the plot
    assert "Mistral-7B (paper)" in html and "Table 3" in html


@pytest.mark.unit
def test_the_protocol_is_table_3s_arms_with_the_papers_figures():
    protocol = get_experiment("icr2-fine-tuning").describe()
    assert protocol["conditions"] == ["closed_book", "vanilla_rag", "untrained", "sft_da", "sft_rta", "sft_cci",
                                      "rethead", "sft_da_rap", "sft_rta_rap", "oracle", "sft_da_gold_only"]
    assert protocol["registered_size"] == 426 and protocol["trains"] is True
    assert {"adapters", "answers_from", "recipes", "reader"} == set(protocol["options"])
    # ICR2 Table 3, Mistral-7B, ICR2 NQ: the figures the committed report reads each row against
    figures = {f["condition"]: f for f in protocol["paper_figures"]}
    assert {k: v["value"] for k, v in figures.items()} == {
        "closed_book": 0.49, "untrained": 0.53, "sft_da": 0.59, "sft_rta": 0.60, "sft_cci": 0.63, "rethead": 0.48,
        "sft_da_rap": 0.64, "sft_rta_rap": 0.63, "oracle": 0.83}
    assert {f["model"] for f in figures.values()} == {"Mistral-7B"}
    # the arms' context types and weights, the registered comparisons (preregistration.md)
    arms = {a.name: a for a in ARMS}
    assert (arms["oracle"].pipeline, arms["oracle"].context_type) == ("untrained", "gold")
    assert arms["sft_rta_rap"].weights() == ["sft_rta", "rap_heads_sft_rta.json"]
    assert [a.name for a in ARMS if not a.weights()] == ["closed_book", "vanilla_rag", "untrained", "oracle"]
    assert len(CLAIM_ARMS) * 2 == 12 and ("sft_da", "sft_da_gold_only") in PAIRS
    # the questions and recipes the package ships are the registered ones; no evaluation question trains
    for split in ("eval", "train", "dev"):
        assert registered_ids(split) == _ids(REPO / "bench" / "data" / "icr2_table3" / f"{split}_ids.txt")
    assert len(registered_ids()) == 426
    assert all(int(q.rsplit("-", 1)[1]) >= 2024 for q in registered_ids("eval"))
    assert all(int(q.rsplit("-", 1)[1]) < 2000 for q in registered_ids("train") + registered_ids("dev"))
    for name in ("sft_da", "sft_rta", "sft_cci", "sft_da_gold_only", "rethead"):
        assert yaml.safe_load(recipe_file(name).read_text()) == yaml.safe_load(
            (REPO / "training" / "icr2_table3" / f"{name}.yaml").read_text())
    # the committed folder holds every arm's weights where the preset looks for them
    assert all(find_weights(COMMITTED, w) for a in ARMS for w in a.weights())


def test_bad_settings_are_refused_before_any_model_loads(tmp_path, capsys):
    out = tmp_path / "x"
    for argv, said in ((["--set", "adapters=/no/such/folder"], "adapters"),
                       (["--set", "answers_from=/no/such/folder"], "answers_from"),
                       (["--set", "lora=1"], "lora"),
                       (["--set", "recipes=."], "recipes"),  # read only with --train
                       (["--train", "--set", f"adapters={COMMITTED}"], "--train"),
                       (["--train", "--backend", "llama_cpp_server"], "GGUF"),
                       (["--conditions", "sft_xx"], "sft_xx"),
                       (["--set", f"answers_from={COMMITTED / 'arms'}", "--max-new-tokens", "8"], "answers_from")):
        assert main(["reproduce", "icr2-fine-tuning", *argv, "--out", str(out), "--no-progress"]) == 1
        assert said in capsys.readouterr().err
    # the arms that need weights, with no weights given: nothing to run, each with the reason
    assert main(["reproduce", "icr2-fine-tuning", "--conditions", "sft_*", "--out", str(out), "--no-progress"]) == 1
    assert "no sft_da (give --set adapters=DIR" in capsys.readouterr().err
    assert not (out / "arms").exists() and not (out / "data").exists()


def test_committed_answers_give_todays_table_3_figures_for_every_arm(tmp_path):
    out = tmp_path / "ft"
    assert main(["reproduce", "icr2-fine-tuning", "--set", f"adapters={COMMITTED}", "--set",
                 f"answers_from={COMMITTED / 'arms'}", "--out", str(out), "--no-progress"]) == 0
    report, today = _report(out), json.loads((COMMITTED / "report.json").read_text())
    assert report["n"] == today["n"] == 426 and report["run"]["at_registered_size"] is True
    assert list(report["arms"]) == list(today["arms"]) and len(report["arms"]) == 11
    for name, arm in today["arms"].items():
        mine = report["arms"][name]
        assert (mine["answer_match"], mine["exact_match"], mine["vs"]) == (arm["answer_match"], arm["exact_match"],
                                                                           arm["vs"]), name
    assert report["pairs"] == today["pairs"] and report["claim"] == today["claim"]
    # every answer came from the committed caches: no corpus built, no model run
    assert all(c["model_runs"] == 0 for c in report["run"]["counters"].values())
    assert all(s["seeded"] == 426 for s in report["run"]["answers_seeded"].values())
    assert report["run"]["data"] is None and report["not_run"] == []
    _check_files(report, out)
    markdown = (out / "report.md").read_text()
    assert "| sft_da_rap | SFT-DA + RAP | 426 | 0.364 [0.32-0.41] | 0.324 [0.28-0.37] |" in markdown
    assert markdown.split("| sft_da_rap |")[1].split("\n")[0].rstrip().endswith("| 0.64 |")


@pytest.mark.slow  # 2 arms x 1 question of the bundled reader (one on a committed LoRA adapter), then resumed
def test_in_process_from_outside_the_checkout_an_adapter_arm_beside_the_untrained_reader(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.chdir(tmp_path)  # no file of the checkout is read but the adapters given
    out = tmp_path / "ft"
    argv = ["reproduce", "icr2-fine-tuning", "--limit", "1", "--conditions", "untrained,sft_da", "--set",
            f"adapters={COMMITTED}", "--max-new-tokens", "4", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = _report(out)
    assert list(report["arms"]) == ["untrained", "sft_da"] and report["n"] == 1
    assert report["arms"]["sft_da"]["weights"] == {"sft_da": str((COMMITTED / "adapters" / "sft_da").resolve())}
    assert report["arms"]["sft_da"]["vs"]["untrained"]["answer_match"]["p"] == 1.0
    assert report["run"]["at_registered_size"] is False and "not at the registered size" in printed
    records = read_answer_records(out / "arms" / "sft_da" / "answers.jsonl.gz")
    assert [(r["question_id"], r["context_type"], len(r["shown_ids"])) for r in records] == [
        (registered_ids()[0], "corpus", 6)]  # the corpus in context: 6 passages
    assert {c["model_runs"] for c in report["run"]["counters"].values()} == {1}
    _check_files(report, out)
    # run again: every answer comes from the cache, the same figures
    assert main(argv) == 0
    again = _report(out)
    assert all(c["model_runs"] == 0 for c in again["run"]["counters"].values())
    assert again["arms"] == report["arms"]


@pytest.mark.llama_server
def test_through_the_llama_cpp_server_the_arms_needing_weights_are_refused(llama_cpp_backend, tmp_path):
    out = tmp_path / "ft"
    assert main(["reproduce", "icr2-fine-tuning", "--backend", llama_cpp_backend, "--limit", "1", "--conditions",
                 "closed_book,untrained,oracle,sft_da,sft_da_rap,rethead", "--set", f"adapters={COMMITTED}",
                 "--max-new-tokens", "8", "--out", str(out), "--no-progress"]) == 0
    report = _report(out)
    assert "smollm2-135m-instruct at http://127.0.0.1:" in report["run"]["backend"]  # the served model answered
    assert list(report["arms"]) == ["closed_book", "untrained", "oracle"] and report["n"] == 1
    refused = {r["arm"]: r["reason"] for r in report["not_run"]}
    assert set(refused) == {"sft_da", "sft_da_rap", "rethead"}
    assert all("plain GGUF" in reason for reason in refused.values())
    assert "needs sft_da and rap_heads_sft_da.json" in refused["sft_da_rap"]
    _check_files(report, out)
    assert "arms not run" in (out / "report.md").read_text()


@pytest.mark.unit
def test_seeding_leaves_an_answer_given_to_another_wording_of_the_question(tmp_path):
    import gzip
    from types import SimpleNamespace

    from icr2_components.evaluation.compare.cache import AnswerCache

    experiment, arm = get_experiment("icr2-fine-tuning"), arm_by_name("closed_book")
    records = list(read_answer_records(COMMITTED / "arms" / "closed_book" / "answers.jsonl.gz"))
    ids = [record["question_id"] for record in records]
    reworded = {**records[0], "query": records[0]["query"] + " (asked another way)"}
    (tmp_path / "from" / "closed_book").mkdir(parents=True)
    (tmp_path / "from" / "closed_book" / "answers.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r) + "\n" for r in [reworded, *records[1:]]).encode()))
    spec = SimpleNamespace(hash="h", name="closed_book", path="closed_book.yaml")
    counts = experiment.seed_answers(arm, spec, tmp_path / "from", ids, tmp_path / "run")
    assert counts["other_question"] == 1 and counts["seeded"] == len(records) - 1, counts
    cache = AnswerCache(tmp_path / "run" / "arms" / "closed_book" / "answers.jsonl.gz", writable=False)
    seeded = {record["question_id"] for record in cache.records.values()}
    assert records[0]["question_id"] not in seeded and len(seeded) == len(records) - 1
