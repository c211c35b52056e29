"""SFT on the real SmolLM2 (CPU, a few steps on one or two real NQ-sample examples, overfitting on purpose):
each method's loss falls, the retrieval markers survive save and load, a LoRA adapter merges into a plain
folder that reloads with the same loss, and the RTA-trained reader, loaded by path, writes a parseable reply."""

import json
from pathlib import Path

import pytest

from icr2_components.training.recipe import recipe_from_dict


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    path = tmp_path_factory.mktemp("sft-data") / "train.jsonl"
    build_sample_benchmark(path, limit=2, budget_passages=2)
    return path


def sft_recipe(method, train_file, out, **overrides):
    values = {
        "method": method, "model": "smollm2-135m-instruct", "output_dir": str(out),
        "data": {"train": str(train_file), "limit": 1},
        "training": {"learning_rate": 1e-4, "max_steps": 5, "gradient_accumulation_steps": 1, "device": "cpu",
                     "save_steps": 100},
    }
    values.update(overrides)
    return recipe_from_dict(values)


@pytest.fixture(scope="module")
def rta_run(train_file, tmp_path_factory):
    from icr2_components.training.sft import train_sft

    out = tmp_path_factory.mktemp("rta")
    # The marker rows need their own rate to be emitted after 5 steps (training.new_token_learning_rate).
    training = {
        "learning_rate": 1e-4,
        "new_token_learning_rate": 1e-2,
        "max_steps": 5,
        "gradient_accumulation_steps": 1,
        "device": "cpu",
        "save_steps": 100,
    }
    return train_sft(sft_recipe("rta", train_file, out, training=training), progress=False)


def test_rta_loss_falls_and_markers_survive_save_and_load(rta_run):
    from transformers import AutoConfig, AutoTokenizer

    from icr2_components.training.special_tokens import check_marker_tokens

    summary = rta_run.summary
    assert summary["first_examples_loss_after"] < 0.5 * summary["first_examples_loss_before"]
    tokenizer = AutoTokenizer.from_pretrained(rta_run.output_dir)
    assert check_marker_tokens(tokenizer) == [49152, 49153]  # appended after SmolLM2's 49,152 tokens
    assert AutoConfig.from_pretrained(rta_run.output_dir).vocab_size == len(tokenizer) == 49154
    assert json.loads((Path(rta_run.output_dir) / "training_summary.json").read_text())["method"] == "rta"


def test_rta_reader_loaded_by_path_retrieves_then_answers(rta_run, train_file):
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
    from icr2_components.readers import LocalChatReader
    from icr2_components.text.retrieval_replies import parse_generation
    from icr2_components.text.templates import render_cic_prompt

    instance = next(read_icr2_benchmark(train_file))
    reader = LocalChatReader(model=rta_run.output_dir, max_new_tokens=220, dtype="float32", device="cpu")
    prompt = render_cic_prompt("qa", instance.query, instance.documents())
    reply = reader.run(messages=prompt.messages)["replies"][0].text
    parsed = parse_generation(reply, {d.meta["passage_id"]: d.content for d in instance.documents()})
    assert parsed.has_retrieval, reply
    assert set(instance.gold_passage_ids) <= set(parsed.retrieved_ids), reply
    assert parsed.answer.strip()


@pytest.mark.parametrize("method", ["da", "cci"])
def test_lora_loss_falls_and_the_merged_folder_reloads(method, train_file, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from icr2_components.training.dataset import load_sft_examples
    from icr2_components.training.sft import mean_target_loss, train_sft

    recipe = sft_recipe(
        method,
        train_file,
        tmp_path / method,
        finetuning="lora",
        lora={"r": 8, "alpha": 16, "dropout": 0.0},
        training={
            "learning_rate": 2e-3,
            "max_steps": 3,
            "gradient_accumulation_steps": 1,
            "device": "cpu",
            "save_steps": 100,
        },
    )
    summary = train_sft(recipe, progress=False).summary
    assert summary["first_examples_loss_after"] < 0.7 * summary["first_examples_loss_before"]
    folder = tmp_path / method
    assert not (folder / "adapter_config.json").exists()  # merged: a plain model folder
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    examples = load_sft_examples(train_file, tokenizer, method, 8192, limit=1).examples
    assert mean_target_loss(model, examples, tokenizer.pad_token_id) == pytest.approx(
        summary["first_examples_loss_after"], rel=1e-3
    )


def test_icr2_train_runs_the_committed_da_recipe_from_the_cli(tmp_path, capsys):
    from icr2_components.cli import main

    out = tmp_path / "da"
    code = main(
        [
            "train",
            "--config",
            "training/smollm2_cpu_da.yaml",
            "--no-progress",
            "--set",
            f"output_dir={out}",
            "--set",
            "data.build_sample.limit=3",
            "--set",
            "data.build_sample.budget_passages=2",
            "--set",
            "training.max_steps=2",
            "--set",
            "training.eval_steps=1",
            "--set",
            "training.save_steps=1",
        ]
    )
    assert code == 0
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["method"] == "da" and summary["global_steps"] >= 1 and summary["validation_examples"] == 1
    assert (out / "config.json").exists() and "wrote" in capsys.readouterr().out


def test_rta_model_loads_by_path_into_the_rap_filter(rta_run, train_file, tmp_path):
    """The fine-tuned folder is a model like any other: probe its heads and filter with it, by path."""
    from haystack import Document

    from icr2_components.filters import RetrievalAttentionFilter
    from icr2_components.filters.probing.cic_instances import read_benchmark_instances
    from icr2_components.filters.probing.probing_job import probe_to_artifact

    instances = list(read_benchmark_instances(train_file))
    artifact = tmp_path / "heads.json"
    probe_to_artifact(
        instances, rta_run.output_dir, m=1, q=2, max_m=1, dtype="float32", device="cpu", artifact_path=artifact
    )
    rap = RetrievalAttentionFilter(
        artifact=str(artifact), model=rta_run.output_dir, top_m=1, dtype="float32", device="cpu"
    )
    documents = [Document(content=d.content, meta=dict(d.meta)) for d in instances[0].documents]
    result = rap.run(query=instances[0].query, documents=documents)
    assert 1 <= len(result["documents"]) <= 2
    with pytest.raises(ValueError, match="probed on"):  # the base model is another model for these heads
        RetrievalAttentionFilter(
            artifact=str(artifact), model="smollm2-135m-instruct", dtype="float32", device="cpu"
        ).warm_up()


def test_sft_resumes_from_its_last_checkpoint(train_file, tmp_path):
    from icr2_components.training.sft import train_sft

    out = tmp_path / "resume"
    # LoRA without merging: each checkpoint holds the adapter and its optimizer state (a few MB), not the 135M
    # model's 1.6 GB, so the test does not fill a small CI disk. Resuming is the same Trainer path either way.
    small = {"finetuning": "lora", "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "merge": False}}
    training = {
        "learning_rate": 1e-4,
        "max_steps": 2,
        "gradient_accumulation_steps": 1,
        "device": "cpu",
        "save_steps": 1,
    }
    first = train_sft(sft_recipe("da", train_file, out, training=training, **small), progress=False).summary
    assert first["resumed_from"] is None and (out / "checkpoint-2" / "trainer_state.json").exists()
    resumed = train_sft(
        sft_recipe(
            "da", train_file, out, training={**training, "max_steps": 3, "resume_from_checkpoint": True}, **small
        ),
        progress=False,
    ).summary
    assert resumed["resumed_from"].endswith("checkpoint-2") and resumed["resumed_at_step"] == 2
    assert resumed["global_steps"] == 3
    logged_steps = [entry["step"] for entry in resumed["log_history"] if "loss" in entry]
    assert logged_steps == [1, 2, 3]  # steps 1-2 restored from the checkpoint's state, step 3 trained now
    with pytest.raises(FileNotFoundError, match="holds no complete checkpoint"):
        train_sft(
            sft_recipe("da", train_file, tmp_path / "empty", training={**training, "resume_from_checkpoint": True}),
            progress=False,
        )
