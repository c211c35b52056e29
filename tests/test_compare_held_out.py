"""Dev/test discipline of ``icr2 compare`` with the real SmolLM2 (one or two generated tokens, short contexts):
a real ``--tune`` never sees a test question, a tuned YAML is refused on its dev questions, a run's question ids
are written and re-run identically, and probed questions are left out of an evaluation."""

import functools
import json
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.compare.held_out import HeldOutError
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.evaluation.compare.splits import (
    file_sha256,
    ids_hash,
    read_question_ids,
    split_question_ids,
    write_question_ids,
)
from icr2_components.kilt.questions import dataset_question_ids, read_compare_questions
from icr2_components.pipeline_spec import PipelineSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pipeline_runs(monkeypatch):
    """Every PipelineSpec.run call as (pipeline file, query), in order; the run itself is the real one."""
    calls = []
    original = PipelineSpec.run

    @functools.wraps(original)
    def recording(self, query, *args, **kwargs):
        calls.append((self.path, query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(PipelineSpec, "run", recording)
    return calls


def test_no_tuned_setting_ever_saw_a_test_question(tmp_path, smollm2, pipeline_runs, capsys):
    """A real --tune of CAD's alpha on 2 dev questions of the seeded split, then the test run on 2 test questions.
    The ids the tuning recorded and the ids it actually ran (the queries each pipeline call received, mapped back
    to question ids) are the dev split's first 2 and disjoint from the test ids compare reported on; the same
    tuned YAML is then refused on a run that includes one of its dev questions, before any model call."""
    data = yaml.safe_load((ROOT / "pipelines" / "cmt_cad.yaml").read_text())
    data["metadata"]["tunable"] = {"reader.alpha": [0.0, 1.0]}
    source = tmp_path / "cad_small.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "run"
    code = main(
        [
            "compare",
            "--pipelines",
            str(source),
            "--tune",
            "--dev-limit",
            "2",
            "--limit",
            "2",
            "--split-seed",
            "7",
            "--context-types",
            "gold",
            "--max-new-tokens",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    run = report["run"]
    test_ids = run["question_ids"]
    assert len(test_ids) == 2 and read_question_ids(out / "question_ids.txt") == test_ids
    assert run["question_ids_sha256"] == ids_hash(test_ids) and run["seeds"]["split_seed"] == 7
    assert run["selection"]["mode"] == "split" and run["selection"]["split"]["name"] == "test"

    # the split recomputed independently from the dataset's ids
    all_ids, _, dataset = dataset_question_ids(None)
    split = split_question_ids(all_ids, seed=7, dev_fraction=0.2)
    assert test_ids == split.test[:2]
    tuned_file = out / "tuning" / "cad_small.tuned.yaml"
    tuned = yaml.safe_load(tuned_file.read_text())["metadata"]["tuned"]
    assert tuned["dev_question_ids"] == split.dev[:2]
    assert tuned["dev_question_ids_sha256"] == ids_hash(split.dev[:2])
    assert tuned["dataset"] == dataset and tuned["dataset_sha256"] == file_sha256(dataset) == run["dataset_sha256"]
    assert tuned["dev_selection"] == {"question_ids": "given", "split": "dev", "split_seed": 7, "dev_fraction": 0.2,
                                      "dev_limit": 2}
    assert read_question_ids(tuned["dev_question_ids_file"]) == split.dev[:2]
    assert run["selection"]["held_out"]["tuned"] == {
        "cad_small.tuned": {"dev_questions": 2, "dev_question_ids_sha256": ids_hash(split.dev[:2]), "overlap": 0,
                            "dev_selection": tuned["dev_selection"]}}

    # what each pipeline call actually received
    questions, _, _ = read_compare_questions(None, ids=split.dev[:2] + test_ids)
    by_query = {q.query: q.id for q in questions}
    assert len(by_query) == 4
    tuning_calls = [by_query[query] for path, query in pipeline_runs if path.endswith("cad_small.candidate.yaml")]
    test_calls = [by_query[query] for path, query in pipeline_runs if path == str(tuned_file)]
    assert len(tuning_calls) + len(test_calls) == len(pipeline_runs)  # no other pipeline ran
    assert set(tuning_calls) == set(tuned["dev_question_ids"])  # 2 settings x 2 questions x the built contexts
    assert test_calls == test_ids
    assert not set(tuning_calls) & set(test_ids) and not set(tuned["dev_question_ids"]) & set(test_ids)
    assert {r["question_id"] for r in read_answer_records(out / "answers.jsonl")} == set(test_ids)

    # the tuned YAML on a run holding one of its dev questions: refused, nothing generated
    pipeline_runs.clear()
    mixed = write_question_ids(tmp_path / "mixed.txt", [test_ids[0], split.dev[1]])
    with pytest.raises(HeldOutError, match=rf"tuned on 1 of this run's questions \({split.dev[1]}\)"):
        run_compare([str(tuned_file)], question_ids=mixed, context_types="gold", out_dir=tmp_path / "again",
                    max_new_tokens=1, progress=False)
    capsys.readouterr()
    assert main(["compare", "--pipelines", str(tuned_file), "--split", "dev", "--split-seed", "7", "--limit", "1",
                 "--context-types", "gold", "--out", str(tmp_path / "dev"), "--no-progress"]) == 1
    assert "tuned on 1 of this run's questions" in capsys.readouterr().err
    assert pipeline_runs == []


def test_question_id_file_runs_exactly_its_questions_and_a_run_repeats_on_identical_ids(tmp_path, smollm2,
                                                                                        pipeline_runs, capsys):
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("# two questions and a typo\nnq-sample-00031\nnq-sample-9999 # not in the sample\n"
                        "nq-sample-00004\n")
    out = tmp_path / "a"
    assert main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--question-ids", str(ids_file),
                 "--context-types", "open", "--max-new-tokens", "1", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "1 unknown ids in" in printed and "nq-sample-9999" in printed
    run = json.loads((out / "report.json").read_text())["run"]
    assert run["question_ids"] == ["nq-sample-00031", "nq-sample-00004"]  # file order
    assert [query for _, query in pipeline_runs] == [q.query for q in read_compare_questions(
        None, ids=["nq-sample-00031", "nq-sample-00004"])[0]]
    assert run["selection"]["file"] == {"path": str(ids_file), "sha256": file_sha256(ids_file), "requested": 3,
                                        "found": 2, "unknown": 1, "unknown_examples": ["nq-sample-9999"]}
    assert run["seeds"] == {"split_seed": None, "stats_seed": 0, "pipelines": {"closed_book": {}}}
    written = (out / "question_ids.txt").read_text()
    assert "# dataset: " in written and read_question_ids(out / "question_ids.txt") == run["question_ids"]
    # a second run on the first run's ids: identical questions, everything cached (no model call)
    pipeline_runs.clear()
    report = run_compare(["pipelines/closed_book.yaml"], question_ids=out / "question_ids.txt", context_types="open",
                         out_dir=out, max_new_tokens=1, progress=False)
    assert report["run"]["question_ids_sha256"] == run["question_ids_sha256"] and pipeline_runs == []


def test_probed_questions_are_left_out_of_every_pipeline(tmp_path, smollm2, pipeline_runs):
    """PH3's committed artifact was probed on the first 16 NQ-sample questions: a run with its pipeline and
    closed-book starts at question 16 for both (same questions, so paired tests still hold), and says so."""
    report = run_compare(["pipelines/closed_book.yaml", "pipelines/cmt_ph3_context.yaml"], limit=2,
                         context_types="gold", out_dir=tmp_path / "o", max_new_tokens=1, progress=False)
    run = report["run"]
    assert run["question_ids"] == ["nq-sample-00016", "nq-sample-00017"]
    held = run["selection"]["held_out"]
    assert held["excluded_probed"] == 16
    assert held["artifacts"]["ph3_heads_smollm2"]["pipelines"] == ["cmt_ph3_context"]
    records = read_answer_records(tmp_path / "o" / "answers.jsonl")
    assert {(r["pipeline"], r["question_id"]) for r in records} == {
        (p, q) for p in ("closed_book", "cmt_ph3_context") for q in run["question_ids"]}
    probed = set(json.loads((ROOT / "bench/results/ph3_heads_smollm2.json").read_text())["probed_ids"])
    asked = {q.query for q in read_compare_questions(None, ids=sorted(probed))[0]}
    assert not asked & {query for _, query in pipeline_runs}
