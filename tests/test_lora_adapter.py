"""A LoRA run kept as an adapter (``lora.merge: false``) is small, names its base by the recipe's alias, and loads by
path anywhere a model name is taken: ``resolve_model(adapter_dir)`` merges it into its base (models/adapters.py)
and the merged model gives the trained model's logits, the retrieval markers' trained rows included. Real
SmolLM2, two SFT-CCI steps on real corpus-in-context examples."""

import json
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from icr2_components.training import sft
    from icr2_components.training.recipe import recipe_from_dict
    from icr2_components.training.sample_data import build_sample_benchmark

    work = tmp_path_factory.mktemp("lora-adapter")
    build_sample_benchmark(work / "train.jsonl", limit=2, budget_passages=3)
    captured = {}
    original = sft.save_result

    def keep_model(model, tokenizer, recipe):
        captured.update(model=model, tokenizer=tokenizer)
        return original(model, tokenizer, recipe)

    sft.save_result = keep_model
    try:
        recipe = recipe_from_dict(
            {
                "method": "cci",
                "model": "smollm2-135m-instruct",
                "output_dir": str(work / "run"),
                "data": {"train": str(work / "train.jsonl")},
                "finetuning": "lora",
                "lora": {"r": 4, "alpha": 8, "merge": False},
                "training": {
                    "max_steps": 2,
                    "gradient_accumulation_steps": 1,
                    "device": "cpu",
                    "learning_rate": 1e-2,
                    "new_token_learning_rate": 5e-2,
                },
            }
        )
        outcome = sft.train_sft(recipe, progress=False)
    finally:
        sft.save_result = original
    return outcome, captured


def test_adapter_is_small_and_names_its_base_by_alias(trained):
    outcome, _ = trained
    folder = Path(outcome.output_dir)
    assert folder.name == "adapter"
    assert (folder / "adapter_model.safetensors").stat().st_size < 5_000_000  # no 28M-parameter embedding copy
    assert (
        json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m-instruct"
    )
    assert json.loads((folder / "training_ids.json").read_text())


def test_adapter_resolves_to_a_merged_model_with_the_trained_logits(trained):
    from transformers import AutoModelForCausalLM

    from icr2_components.models import resolve_model

    outcome, captured = trained
    merged_path = resolve_model(outcome.output_dir)
    assert resolve_model(outcome.output_dir) == merged_path  # merged once, then reused
    merged = AutoModelForCausalLM.from_pretrained(merged_path)
    tokenizer = captured["tokenizer"]
    ids = tokenizer("Context <RETRIEVAL> PSG001 </RETRIEVAL> The correct answer is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        trained_logits = captured["model"].eval()(input_ids=ids).logits
        merged_logits = merged(input_ids=ids).logits
    assert merged.get_input_embeddings().weight.shape[0] == len(tokenizer) == 49154
    assert torch.allclose(trained_logits, merged_logits, atol=1e-3)
