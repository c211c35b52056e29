"""The seeded dev/test split, question-id files, and which questions compare may use (tuned and probed pipelines),
on the real bundled NQ sample and the committed head artifacts (no generation)."""

import json
import random
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.evaluation.compare.held_out import HeldOutError, pipeline_seeds, select_questions
from icr2_components.evaluation.compare.run import load_specs
from icr2_components.evaluation.compare.splits import (
    QuestionIdFileError,
    file_sha256,
    ids_hash,
    read_question_ids,
    resolve_question_ids,
    split_question_ids,
    split_value,
    write_question_ids,
)
from icr2_components.kilt.questions import dataset_question_ids, read_compare_questions

ROOT = Path(__file__).resolve().parents[1]
IDS = [f"q{i:04d}" for i in range(2000)]


@pytest.mark.unit
def test_split_is_deterministic_disjoint_covering_and_keeps_the_given_order():
    a = split_question_ids(IDS, seed=3, dev_fraction=0.25)
    b = split_question_ids(list(IDS), seed=3, dev_fraction=0.25)
    assert (a.dev, a.test) == (b.dev, b.test)
    assert not set(a.dev) & set(a.test) and sorted(a.dev + a.test) == sorted(IDS)
    assert a.dev == [i for i in IDS if i in set(a.dev)] and a.test == [i for i in IDS if i in set(a.test)]
    # a fair hash: 2000 draws at p = 0.25 have a standard deviation of 19.4; 5 sigma either side
    assert abs(len(a.dev) - 500) < 97
    # the rule itself, recomputed: sha256("icr2-split/<seed>/<id>")'s first 8 bytes over 2^64 below the fraction
    import hashlib

    first = int.from_bytes(hashlib.sha256(b"icr2-split/3/q0000").digest()[:8], "big") / 2**64
    assert split_value("q0000", 3) == first and (("q0000" in a.dev) == (first < 0.25))
    other = split_question_ids(IDS, seed=4, dev_fraction=0.25)
    assert set(other.dev) != set(a.dev)  # the seed matters


@pytest.mark.unit
def test_fraction_split_is_stable_when_the_file_grows_or_is_reordered():
    before = split_question_ids(IDS[:1200], seed=0, dev_fraction=0.2)
    shuffled = list(IDS)
    random.Random(1).shuffle(shuffled)
    after = split_question_ids(shuffled, seed=0, dev_fraction=0.2)
    assert set(before.dev) <= set(after.dev) and set(before.test) <= set(after.test)


@pytest.mark.unit
def test_count_split_and_bad_parameters():
    split = split_question_ids(IDS[:50], seed=0, dev_count=7)
    assert len(split.dev) == 7 and len(split.test) == 43
    assert set(split.dev) == set(sorted(IDS[:50], key=lambda i: split_value(i, 0))[:7])
    assert split.describe()["dev_count"] == 7 and "dev_fraction" not in split.describe()
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        split_question_ids(IDS, dev_fraction=1.0)
    with pytest.raises(ValueError, match="not both"):
        split_question_ids(IDS, dev_fraction=0.2, dev_count=3)
    with pytest.raises(ValueError, match="between 1 and 49"):
        split_question_ids(IDS[:50], dev_count=50)
    with pytest.raises(ValueError, match="repeated: \\['q0001'\\]"):
        split_question_ids(["q0000", "q0001", "q0001"])
    with pytest.raises(ValueError, match="seed must be an integer"):
        split_question_ids(IDS, seed="0")


@pytest.mark.unit
def test_question_id_file_round_trip_comments_and_errors(tmp_path):
    path = write_question_ids(
        tmp_path / "ids.txt", ["b", "a", "nq-sample-00003"], comments=["made by a test", "two lines"]
    )
    text = path.read_text()
    assert text.startswith("# made by a test\n# two lines\n") and text.endswith("b\na\nnq-sample-00003\n")
    assert read_question_ids(path) == ["b", "a", "nq-sample-00003"]
    hand = tmp_path / "hand.txt"
    hand.write_text("\ufeff# header\n\n  x1  \nx2 # why this one\n\t# indented comment\nx3\n")
    assert read_question_ids(hand) == ["x1", "x2", "x3"]
    hand.write_text("x1\nx2\n# c\nx1\nx3\nx2\n")
    with pytest.raises(
        QuestionIdFileError, match=r"repeats 2 question id\(s\) \('x1' on lines 1, 4; 'x2' on lines 2, 6"
    ):
        read_question_ids(hand)
    hand.write_text("# only a comment\n\n")
    with pytest.raises(QuestionIdFileError, match="lists no question id"):
        read_question_ids(hand)
    with pytest.raises(QuestionIdFileError, match="not found"):
        read_question_ids(tmp_path / "missing.txt")
    for bad in (["a", "a"], ["#a"], ["a #b"], [" a"], [""], ["a\nb"]):
        with pytest.raises(ValueError):
            write_question_ids(tmp_path / "bad.txt", bad)
    resolved = resolve_question_ids(["c", "zz", "a", "yy"], ["a", "b", "c"])
    assert (resolved.found, resolved.unknown) == (["c", "a"], ["zz", "yy"])
    assert resolved.describe() == {"requested": 4, "found": 2, "unknown": 2, "unknown_examples": ["zz", "yy"]}
    assert ids_hash(["a", "b"]) != ids_hash(["b", "a"])


def test_dataset_ids_and_reading_chosen_questions_in_the_given_order(sample_files, tmp_path):
    ids, skips, path = dataset_question_ids(None)
    assert path == str(sample_files.tasks) and len(ids) == 2655 and skips.total == 0
    assert ids[:2] == ["nq-sample-00000", "nq-sample-00001"]
    questions, _, _ = read_compare_questions(None, ids=["nq-sample-00042", "nq-sample-00007"])
    assert [q.id for q in questions] == ["nq-sample-00042", "nq-sample-00007"]
    assert all(q.answers and q.gold_documents for q in questions)
    # a repeated id in the file: first occurrence used, the repeat counted (not silently taken twice)
    lines = Path(sample_files.tasks).read_text().splitlines()[:3]
    repeated = tmp_path / "repeated.jsonl"
    repeated.write_text("\n".join([*lines, lines[1]]) + "\n")
    ids, skips, _ = dataset_question_ids(str(repeated))
    assert ids == ["nq-sample-00000", "nq-sample-00001", "nq-sample-00002"]
    assert skips.counts["repeated question id"] == 1


def _artifact_specs():
    return load_specs(["pipelines/closed_book.yaml", "pipelines/rap.yaml", "pipelines/cmt_ph3_context.yaml"])


def test_committed_artifacts_record_their_probed_ids_and_compare_leaves_them_out(sample_files, tmp_path):
    rap = json.loads((ROOT / "bench/results/rap_heads_smollm2.json").read_text())
    ph3 = json.loads((ROOT / "bench/results/ph3_heads_smollm2.json").read_text())
    assert len(rap["probed_ids"]) == rap["instances"] == 16 and len(ph3["probed_ids"]) == ph3["instances"] == 16
    assert ph3["probed_ids"] == [f"nq-sample-{i:05d}" for i in range(16)]
    assert "record_probed_ids.py" in rap["probed_ids_note"] and "record_probed_ids.py" in ph3["probed_ids_note"]
    probed = set(rap["probed_ids"]) | set(ph3["probed_ids"])
    specs = _artifact_specs()
    selection = select_questions(specs, limit=30)
    all_ids = dataset_question_ids(None)[0]
    assert selection.ids == [i for i in all_ids if i not in probed][:30]  # left out before the limit
    held = selection.describe()["held_out"]
    assert held["excluded_probed"] == len(probed) == 23
    assert held["artifacts"]["rap_heads_smollm2"]["pipelines"] == ["rap"]
    assert set(held["artifacts"]["ph3_heads_smollm2"]["excluded_ids"]) == set(ph3["probed_ids"])
    assert selection.dataset_sha256 == file_sha256(sample_files.tasks)
    # on the test split, only the probed ids that fell in it are left out
    test = select_questions(specs, split="test", split_seed=5)
    expected = split_question_ids(all_ids, seed=5).test
    assert test.ids == [i for i in expected if i not in probed]
    assert test.describe()["held_out"]["excluded_probed"] == len(probed & set(expected))
    # a question-id file is run as it is, so one listing a probed question is refused
    ids_file = write_question_ids(tmp_path / "ids.txt", ["nq-sample-00100", "nq-sample-00027"])
    with pytest.raises(
        HeldOutError,
        match=r"lists 1 question\(s\) a pipeline's head artifact was probed on \(nq-sample-00027; "
        r"rap_heads_smollm2 \(rap\): 1\)",
    ):
        select_questions(specs, question_ids=str(ids_file))
    assert select_questions(specs[:1], question_ids=str(ids_file)).ids == ["nq-sample-00100", "nq-sample-00027"]
    # without those pipelines nothing is left out
    assert select_questions(specs[:1], limit=3).ids == all_ids[:3]
    # the pool the held-out evaluations of docs/benchmarks/answer-quality.md run on: 600 ids of the sample, none
    # probed, run as they are
    heldout = select_questions(specs, question_ids=str(ROOT / "bench/data/heldout_nq_ids.txt"))
    assert len(heldout.ids) == 600 and heldout.file["unknown"] == 0 and not set(heldout.ids) & probed


def test_an_artifact_without_probed_ids_is_refused(tmp_path):
    data = json.loads((ROOT / "bench/results/ph3_heads_smollm2.json").read_text())
    del data["probed_ids"], data["probed_ids_note"]
    artifact = tmp_path / "old_ph3.json"
    artifact.write_text(json.dumps(data))
    pipeline = yaml.safe_load((ROOT / "pipelines/cmt_ph3_context.yaml").read_text())
    pipeline["components"]["reader"]["init_parameters"]["artifact"] = str(artifact)
    path = tmp_path / "old_ph3.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    with pytest.raises(HeldOutError, match="does not record the questions it was probed on"):
        select_questions(load_specs([str(path)]), limit=2)


def test_a_tuned_yaml_is_refused_on_its_dev_questions_and_old_tuned_yamls_without_ids(tmp_path, capsys):
    data = yaml.safe_load((ROOT / "pipelines/closed_book.yaml").read_text())
    data.setdefault("metadata", {})["tuned"] = {"from": "pipelines/closed_book.yaml", "setting": {},
                                                "dev_question_ids": ["nq-sample-00002", "nq-sample-00900"]}
    tuned = tmp_path / "closed.tuned.yaml"
    tuned.write_text(yaml.safe_dump(data, sort_keys=False))
    specs = load_specs([str(tuned)])
    with pytest.raises(HeldOutError, match=r"closed.tuned was tuned on 1 of this run's questions \(nq-sample-00002\)"):
        select_questions(specs, limit=3)
    assert select_questions(specs, question_ids=["nq-sample-00003"]).tuned["closed.tuned"]["dev_questions"] == 2
    assert main(["compare", "--pipelines", str(tuned), "--limit", "3", "--out", str(tmp_path / "o")]) == 1
    assert "tuned on 1 of this run's questions" in capsys.readouterr().err
    del data["metadata"]["tuned"]["dev_question_ids"]
    tuned.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(HeldOutError, match="records no dev_question_ids"):
        select_questions(load_specs([str(tuned)]), question_ids=["nq-sample-00003"])


def test_bad_question_choices_are_refused(tmp_path, capsys):
    specs = load_specs(["pipelines/closed_book.yaml"])
    with pytest.raises(ValueError, match="drop --split and --limit"):
        select_questions(specs, question_ids=["nq-sample-00001"], limit=1)
    with pytest.raises(ValueError, match=r"No question of .* is left"):
        select_questions(specs, question_ids=["no-such-question"])
    out = str(tmp_path / "o")
    assert main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--dev-offset", "3", "--out", out]) == 1
    assert "--dev-offset is gone" in capsys.readouterr().err
    assert main(["compare", "--pipelines", "pipelines/cmt_cad.yaml", "--tune", "--split", "dev", "--out", out]) == 1
    assert "--split dev would report on the questions it tunes on" in capsys.readouterr().err
    from icr2_components.evaluation.compare.tuning import tune_pipeline

    with pytest.raises(ValueError, match="1 dev question id\\(s\\) are not usable questions"):
        tune_pipeline(
            "pipelines/cmt_cad.yaml", question_ids=["nq-sample-00001", "no-such-question"], out_dir=tmp_path / "t"
        )


@pytest.mark.unit
def test_pipeline_seeds_are_read_from_the_yaml():
    rap = yaml.safe_load((ROOT / "pipelines/rap.yaml").read_text())
    assert pipeline_seeds(rap) == {"corpus.seed": 0}
    assert pipeline_seeds(yaml.safe_load((ROOT / "pipelines/closed_book.yaml").read_text())) == {}
