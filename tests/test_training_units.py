"""Training units on real inputs (NQ sample records, the SmolLM2 tokenizer and config): targets and their
parser, Gumbel-TopK, recipes, and bad input (gold ids missing, unknown method, sequences too long)."""

import json

import pytest
import torch

from icr2_components.text.retrieval_replies import RETRIEVAL_END, RETRIEVAL_START, format_target, parse_generation
from icr2_components.training.examples import SequenceTooLongError, encode_example
from icr2_components.training.gumbel_topk import gumbel_topk, temperature
from icr2_components.training.recipe import RecipeError, load_recipe, recipe_from_dict


@pytest.fixture(scope="module")
def sample_benchmark(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    path = tmp_path_factory.mktemp("bench") / "train.jsonl"
    build_sample_benchmark(path, limit=4, budget_passages=3)
    return path


@pytest.fixture(scope="module")
def tokenizer():
    from icr2_components.models.cache import MODEL_CACHE

    return MODEL_CACHE.tokenizer("smollm2-135m-instruct")


def first_instance(path):
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

    return next(read_icr2_benchmark(path))


@pytest.mark.parametrize("method", ["rta", "cci"])
def test_targets_parse_back_into_gold_ids_and_answer(sample_benchmark, method):
    instance = first_instance(sample_benchmark)
    gold = [(d.meta["passage_id"], d.content) for d in instance.gold_documents()]
    target = format_target(method, instance.answers[0], gold)
    assert target.startswith(RETRIEVAL_START) and RETRIEVAL_END in target
    context = {d.meta["passage_id"]: d.content for d in instance.documents()}
    parsed = parse_generation(target, context)
    assert parsed.has_retrieval and parsed.unmatched == []
    assert parsed.retrieved_ids == instance.gold_passage_ids
    assert parsed.answer == instance.answers[0]


@pytest.mark.unit
def test_direct_answer_has_no_retrieval_and_cited_unknown_ids_are_reported():
    assert parse_generation(format_target("da", "Paris", [])).answer == "Paris"
    parsed = parse_generation(
        "<RETRIEVAL> The relevant passage ID for this question is PSG009. </RETRIEVAL> The correct answer is X.",
        {"PSG001": "some text"},
    )
    assert parsed.retrieved_ids == [] and parsed.unmatched == ["PSG009"] and parsed.answer == "X"


def test_gumbel_topk_selects_exactly_k_and_passes_gradients():
    scores = torch.tensor([2.0, 0.1, 1.5, -1.0, 0.3], requires_grad=True)
    generator = torch.Generator().manual_seed(0)
    mask = gumbel_topk(scores, k=2, tau=0.5, generator=generator)
    assert sorted(mask.detach().tolist()) == [0.0, 0.0, 0.0, 1.0, 1.0]
    (mask * torch.arange(5.0)).sum().backward()
    assert scores.grad is not None and scores.grad.abs().sum() > 0
    assert gumbel_topk(scores.detach(), k=2, tau=0.5, noise=False).tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]


@pytest.mark.unit
def test_temperature_schedule_goes_from_start_to_end():
    assert temperature(0, 10, 1.0, 0.1) == pytest.approx(1.0)
    assert temperature(9, 10, 1.0, 0.1) == pytest.approx(0.1)
    assert temperature(5, 11, 1.0, 0.0, "linear") == pytest.approx(0.5)


@pytest.mark.unit
def test_recipe_naming_an_unknown_method_is_refused():
    with pytest.raises(RecipeError, match="method is 'sft-magic'; choose one of"):
        recipe_from_dict({"method": "sft-magic", "model": "m", "output_dir": "o", "data": {"train": "t.jsonl"}})
    with pytest.raises(RecipeError, match=r"unknown key\(s\) \[.lr.\] in .*section training"):
        recipe_from_dict(
            {"method": "rta", "model": "m", "output_dir": "o", "data": {"train": "t"}, "training": {"lr": 1}}
        )


@pytest.mark.unit
def test_every_committed_recipe_loads():
    from pathlib import Path

    recipes = sorted(p for p in Path("training").glob("*.yaml") if not p.name.startswith("accelerate"))
    assert len(recipes) >= 8
    methods = {load_recipe(p).method for p in recipes}
    assert methods == {"da", "rta", "cci", "retrieval_head"}
    mistral = load_recipe("training/mistral7b_gpu_rta.yaml")
    assert (mistral.max_seq_length, mistral.training.gradient_accumulation_steps, mistral.training.rope_theta) == (
        32768,
        4,
        1e6,
    )


def test_max_seq_length_beyond_the_model_context_is_refused():
    from transformers import AutoConfig

    from icr2_components.models import resolve_model
    from icr2_components.training.model_loading import SequenceLimitError, effective_max_length

    config = AutoConfig.from_pretrained(resolve_model("smollm2-135m-instruct"))
    assert effective_max_length(config, None) == 8192
    with pytest.raises(SequenceLimitError, match="longer than the model's context"):
        effective_max_length(config, 32768)


def test_too_long_examples_keep_gold_or_fail_clearly(sample_benchmark, tokenizer):
    instance = first_instance(sample_benchmark)
    args = (
        tokenizer,
        instance.id,
        instance.query,
        instance.answers[0],
        instance.documents(),
        instance.gold_passage_ids,
        "cci",
    )
    full = encode_example(*args, max_length=8192)
    assert full.dropped_passages == 0 and len(full.passage_ids) == 3
    # a budget that fits the gold passages but not the whole corpus: distractors go, gold stays
    gold_only = encode_example(*args, max_length=len(full.input_ids) - 20)
    assert gold_only.dropped_passages >= 1 and set(instance.gold_passage_ids) <= set(gold_only.passage_ids)
    assert len(gold_only.input_ids) <= len(full.input_ids) - 20
    assert encode_example(*args, max_length=len(full.input_ids) - 20, truncation="skip") is None
    with pytest.raises(SequenceTooLongError, match="max_length"):
        encode_example(*args, max_length=50, truncation="error")
    assert encode_example(*args, max_length=50) is None  # even the gold passages do not fit: skipped
    # the loss is on the target only
    assert all(label == -100 for label in full.labels[: full.prompt_length])
    assert full.labels[full.prompt_length:] == full.input_ids[full.prompt_length:]


def test_gold_ids_missing_from_the_context_are_counted_not_trained_on(sample_benchmark, tokenizer, tmp_path):
    from icr2_components.training.dataset import load_sft_examples

    records = [json.loads(line) for line in sample_benchmark.read_text().splitlines()]
    records[0]["gold_passage_ids"] = ["PSG999"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    loaded = load_sft_examples(broken, tokenizer, "rta", 8192)
    assert len(loaded.examples) == len(records) - 1
    assert loaded.skips.counts == {"gold passage id not in the context": 1}
    only_bad = tmp_path / "only_bad.jsonl"
    only_bad.write_text(json.dumps(records[0]) + "\n")
    with pytest.raises(ValueError, match=r"No usable training example.*gold passage id not in the context"):
        load_sft_examples(only_bad, tokenizer, "rta", 8192)


def test_tiny_plumbing_new_token_rate_moves_only_the_marker_rows_and_refuses_lora():
    """Plumbing on a tiny random Llama (tied embeddings, as SmolLM2): one AdamW step with the new-token groups
    changes the new rows and the layers, and leaves the old vocabulary rows exactly as they were."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from icr2_components.training.sft import new_token_parameter_groups

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True))
    before = model.get_input_embeddings().weight.detach().clone()
    layer_before = model.model.layers[0].mlp.up_proj.weight.detach().clone()
    optimizer = torch.optim.AdamW(new_token_parameter_groups(model, [38, 39], 1e-2), lr=1e-4, weight_decay=0.1)
    ids = torch.tensor([[1, 38, 5, 39, 7]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    after = model.get_input_embeddings().weight.detach()
    assert torch.equal(after[:38], before[:38])
    assert (after[38:] - before[38:]).abs().max() > 5e-3  # the marker rows moved at the high rate
    assert not torch.equal(model.model.layers[0].mlp.up_proj.weight, layer_before)
    with pytest.raises(RecipeError, match=r"marker rows, which train only with lora\.train_new_token_embeddings"):
        recipe_from_dict(
            {
                "method": "rta",
                "model": "m",
                "output_dir": "o",
                "data": {"train": "t"},
                "finetuning": "lora",
                "lora": {"train_new_token_embeddings": False},
                "training": {"new_token_learning_rate": 1e-2},
            }
        )
    # with LoRA the marker rows are peft's own trainable-token parameters: they alone get the high rate
    lora = recipe_from_dict({"method": "rta", "model": "m", "output_dir": "o", "data": {"train": "t"},
                             "finetuning": "lora", "training": {"new_token_learning_rate": 1e-2}})
    assert lora.training.new_token_learning_rate == 1e-2
