"""Fine-tuned artifacts record the ids they learned from, and ``icr2 compare`` keeps them out of an evaluation.

Real training runs (one or two optimizer steps of the real SmolLM2 on real NQ-sample records, so the runs are
quick and their weights are not worth evaluating; the point is the bookkeeping): an SFT model folder, a LoRA
adapter folder and a retrieval-head folder each carry ``training_ids.json`` with exactly the trained and
validation ids; a pipeline whose reader or ranker reads them is refused on a question-id file listing one of
them (before any model call, naming the folder and the ids), and a run that chooses its own questions leaves them
out for every pipeline and says so. A trained folder that records no ids is refused; a retrain at the same path
changes the pipeline's hash.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from icr2_components.artifacts.training_ids import TRAINING_IDS_FILE, find_trained_artifact
from icr2_components.evaluation.compare.held_out import HeldOutError, select_questions
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.training.recipe import recipe_from_dict

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_IDS = [f"nq-sample-{i:05d}" for i in range(4)]


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    path = tmp_path_factory.mktemp("ids-data") / "train.jsonl"
    build_sample_benchmark(path, limit=4, budget_passages=2)
    return path


def _recipe(out, train_file, method="rta", **extra):
    values = {"method": method, "model": "smollm2-135m-instruct", "output_dir": str(out),
              "data": {"train": str(train_file), "validation_fraction": 0.34}, "max_seq_length": 1024,
              "training": {"max_steps": 1, "gradient_accumulation_steps": 1, "device": "cpu", "learning_rate": 1e-5}}
    values.update(extra)
    return recipe_from_dict(values)


def _written_ids(train_file):
    return [json.loads(line)["id"] for line in train_file.read_text().splitlines()]


@pytest.fixture(scope="module")
def sft_folder(tmp_path_factory, train_file):
    from icr2_components.training.sft import train_sft

    out = tmp_path_factory.mktemp("sft") / "rta"
    outcome = train_sft(_recipe(out, train_file), progress=False)
    return out, outcome.summary


def test_sft_folder_records_exactly_the_ids_it_trained_and_validated_on(sft_folder, train_file):
    out, summary = sft_folder
    record = json.loads((out / TRAINING_IDS_FILE).read_text())
    written = _written_ids(train_file)
    # nq-sample-00004+ were not asked for; every written record is either trained on or validated on, once
    assert sorted(record["train_ids"] + record["validation_ids"]) == sorted(written)
    assert len(record["validation_ids"]) == 1 and not set(record["train_ids"]) & set(record["validation_ids"])
    assert len(record["train_ids"]) == summary["train_examples"]
    assert record["method"] == "rta" and record["data_files"] == [str(train_file)]
    assert summary["training_ids"] == str(out / TRAINING_IDS_FILE)
    artifact = find_trained_artifact(out)
    assert sorted(artifact.ids) == sorted(written)
    # a Trainer checkpoint-* inside the folder is covered by its parent's record
    (out / "checkpoint-1").mkdir(exist_ok=True)
    assert find_trained_artifact(out / "checkpoint-1").run_id == record["run_id"]


def test_lora_adapter_and_retrieval_head_folders_carry_their_ids(tmp_path, train_file):
    from icr2_components.training.joint import train_retrieval_head
    from icr2_components.training.sft import train_sft

    lora = train_sft(_recipe(tmp_path / "lora", train_file, finetuning="lora",
                             lora={"r": 2, "alpha": 4, "merge": False}), progress=False)
    assert lora.output_dir == str(tmp_path / "lora" / "adapter")
    adapter = json.loads((tmp_path / "lora" / "adapter" / TRAINING_IDS_FILE).read_text())
    assert sorted(adapter["train_ids"] + adapter["validation_ids"]) == sorted(_written_ids(train_file))

    summary = train_retrieval_head(_recipe(tmp_path / "head", train_file, method="retrieval_head"), progress=False)
    head = Path(summary["head"])
    assert head.name == "retrieval_head" and (head / TRAINING_IDS_FILE).exists()
    record = json.loads((head / TRAINING_IDS_FILE).read_text())
    assert len(record["train_ids"]) == summary["train_examples"] and record["method"] == "retrieval_head"
    # the ranker may be given the training folder or the head folder: both resolve to the record
    assert find_trained_artifact(tmp_path / "head").run_id == find_trained_artifact(head).run_id == record["run_id"]

    # compare refuses the ranked pipeline on a trained question
    text = (ROOT / "pipelines" / "retrieval_head_ranked.yaml").read_text().replace(
        "runs/smollm2-cpu-retrieval-head", str(tmp_path / "head"))
    pipeline = tmp_path / "head_ranked.yaml"
    pipeline.write_text(text)
    with pytest.raises(HeldOutError, match=r"trained on .*nq-sample-0000"):
        select_questions([PipelineSpec.from_file(str(pipeline))], question_ids=record["train_ids"][:1])


def _reader_pipeline(tmp_path, model_folder) -> Path:
    data = yaml.safe_load((ROOT / "pipelines" / "closed_book.yaml").read_text())
    data["components"]["reader"]["init_parameters"]["model"] = str(model_folder)
    path = tmp_path / "finetuned_closed_book.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_compare_refuses_a_finetuned_reader_on_its_training_ids(sft_folder, tmp_path, monkeypatch):
    """The refusal comes before any model call (PipelineSpec.run is never reached) and names the folder, the kind
    of use and the leaked ids."""
    out, _ = sft_folder
    trained = find_trained_artifact(out).ids
    pipeline = _reader_pipeline(tmp_path, out)
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("\n".join(["nq-sample-00010", trained[0]]) + "\n")
    calls = []
    monkeypatch.setattr(PipelineSpec, "run", lambda self, *a, **k: calls.append(a))
    with pytest.raises(HeldOutError) as refused:
        run_compare([str(pipeline), "pipelines/closed_book.yaml"], question_ids=ids_file, context_types="open",
                    out_dir=tmp_path / "o", max_new_tokens=1, progress=False)
    message = str(refused.value)
    assert "1 question(s) a pipeline's fine-tuned artifact was trained on" in message
    assert trained[0] in message and str(out) in message and "finetuned_closed_book" in message
    assert calls == []


def test_a_chosen_run_leaves_training_ids_out_of_every_pipeline(sft_folder, tmp_path):
    out, _ = sft_folder
    pipeline = _reader_pipeline(tmp_path, out)
    specs = [PipelineSpec.from_file(str(pipeline)), PipelineSpec.from_file("pipelines/closed_book.yaml")]
    selection = select_questions(specs, limit=3)
    assert selection.ids == ["nq-sample-00004", "nq-sample-00005", "nq-sample-00006"]
    held = selection.describe()["held_out"]
    entry = held["artifacts"][str(out)]
    assert entry["kind"] == "trained" and entry["trained_ids"] == 4 and entry["excluded"] == 4
    assert entry["pipelines"] == ["finetuned_closed_book"] and held["excluded_probed"] == 4


def test_a_trained_folder_without_ids_is_refused_and_a_retrain_changes_the_hash(sft_folder, tmp_path):
    out, _ = sft_folder
    copy = tmp_path / "old_run"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("*.safetensors", "checkpoint-*"))
    pipeline = _reader_pipeline(tmp_path, copy)
    before = PipelineSpec.from_file(str(pipeline)).hash
    record = json.loads((copy / TRAINING_IDS_FILE).read_text())
    record["run_id"] = "another-run"
    (copy / TRAINING_IDS_FILE).write_text(json.dumps(record))
    assert PipelineSpec.from_file(str(pipeline)).hash != before
    (copy / TRAINING_IDS_FILE).unlink()
    with pytest.raises(HeldOutError, match=r"records no training_ids\.json"):
        select_questions([PipelineSpec.from_file(str(pipeline))], limit=1)
