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
    # no copy of the base's tokenizer: only the two markers the fine-tuning added, with their ids
    assert not (folder / "tokenizer.json").exists()
    added = json.loads((folder / "tokenizer_added_tokens.json").read_text())
    assert [(t["content"], t["id"], t["special"]) for t in added] == [("<RETRIEVAL>", 49152, False),
                                                                     ("</RETRIEVAL>", 49153, False)]


def test_adapter_resolves_to_a_merged_model_with_the_trained_logits(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
    # the merged folder's tokenizer, rebuilt from the base and the listed markers, is the trained one
    rebuilt = AutoTokenizer.from_pretrained(merged_path)
    assert json.loads(rebuilt.backend_tokenizer.to_str()) == json.loads(tokenizer.backend_tokenizer.to_str())


def test_committed_adapters_tokenizers_are_the_base_plus_their_markers():
    from transformers import AutoTokenizer

    from icr2_components.models.adapters import adapter_tokenizer
    from icr2_components.models.resolver import resolve_model

    adapters = Path(__file__).resolve().parents[1] / "bench" / "results" / "icr2_table3" / "adapters"
    base_path = resolve_model("smollm2-135m-instruct")
    base = AutoTokenizer.from_pretrained(base_path)
    text = "Context <RETRIEVAL> PSG001 </RETRIEVAL> The answer is"
    for name, markers in (("sft_da", False), ("sft_cci", True), ("sft_rta", True)):
        assert not (adapters / name / "tokenizer.json").exists()
        tokenizer = adapter_tokenizer(adapters / name, base_path)
        assert len(tokenizer) == len(base) + (2 if markers else 0), name
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert (49152 in ids and 49153 in ids) == markers, name
        assert tokenizer.chat_template == base.chat_template and tokenizer.pad_token == base.pad_token
