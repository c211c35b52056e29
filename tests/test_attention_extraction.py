"""Query-row attention extraction against eager ``output_attentions`` (tolerance 1e-4).

SmolLM2 (Llama family, 9 query / 3 key-value heads) is the real model. Mistral, Qwen2 and GPT-2 weights are not
available here, so those families (and a second Llama) are checked on tiny randomly initialised configs: the
test is about the plumbing (rotary, GQA grouping, masks, scaling), which random weights exercise fully.
"""

import copy

import pytest
import torch

from icr2_components.models.attention import (
    AttentionAccessError,
    _attention_registry,
    aggregate_spans,
    attention_implementation,
    passage_attention_scores,
    query_attention_rows,
    token_spans_from_char_spans,
)

TOLERANCE = 1e-4


def _tiny_configs():
    from transformers import GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3, max_position_embeddings=512
    )
    return {
        # 4 query heads over 2 key/value heads: grouped-query attention.
        "llama": LlamaConfig(num_attention_heads=4, num_key_value_heads=2, **common),
        # Multi-query (1 kv head) and a sliding window shorter than the input, so the window mask matters.
        "mistral": MistralConfig(num_attention_heads=4, num_key_value_heads=1, sliding_window=16, **common),
        # Qwen2 has biases on q/k/v.
        "qwen2": Qwen2Config(num_attention_heads=4, num_key_value_heads=2, **common),
        # GPT-2: learned positions, fused c_attn, no GQA.
        "gpt2": GPT2Config(vocab_size=128, n_embd=64, n_layer=3, n_head=4, n_positions=512,
                           bos_token_id=0, eos_token_id=0),
    }


def _sdpa_and_eager(config):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    sdpa = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    eager = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    return sdpa, eager


def _eager_rows(eager, input_ids, positions):
    with torch.no_grad():
        attentions = eager(input_ids=input_ids, output_attentions=True).attentions
    full = torch.stack([layer[0] for layer in attentions]).float()  # (L, H, T, T)
    return full[:, :, positions, :]


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gpt2"])
def test_rows_match_eager_tiny_random(family):
    sdpa, eager = _sdpa_and_eager(_tiny_configs()[family])
    assert attention_implementation(sdpa) == "sdpa"
    input_ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    positions = [39, 3, 20, 31]
    rows = query_attention_rows(sdpa, input_ids, query_positions=[-1, 3, 20, 31])
    expected = _eager_rows(eager, input_ids, positions)
    assert rows.shape == expected.shape
    assert torch.allclose(rows, expected, atol=TOLERANCE)
    # Rows are distributions over the keys, and nothing past the query position gets weight.
    assert torch.allclose(rows.sum(-1), torch.ones_like(rows.sum(-1)), atol=TOLERANCE)
    assert rows[:, :, 1, 4:].abs().max() == 0


def test_rows_match_eager_smollm2_gqa(smollm2):
    from icr2_components.models.cache import MODEL_CACHE

    model, tokenizer = smollm2
    eager, _ = MODEL_CACHE.causal_lm(
        "smollm2-135m-instruct", dtype="float32", device="cpu", attn_implementation="eager"
    )
    assert model.config.num_attention_heads == 9 and model.config.num_key_value_heads == 3
    text = "Passage 1: Paris is the capital of France.\nPassage 2: Berlin is in Germany.\nQuestion: capital of France?"
    input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
    length = input_ids.shape[1]
    rows = query_attention_rows(model, input_ids, query_positions=[-1, 10])
    expected = _eager_rows(eager, input_ids, [length - 1, 10])
    assert rows.shape == (30, 9, 2, length)
    assert torch.allclose(rows, expected, atol=TOLERANCE)


def test_passage_scores_are_span_reductions_of_eager_rows_smollm2(smollm2):
    from icr2_components.models.cache import MODEL_CACHE

    model, tokenizer = smollm2
    eager, _ = MODEL_CACHE.causal_lm(
        "smollm2-135m-instruct", dtype="float32", device="cpu", attn_implementation="eager"
    )
    input_ids = tokenizer("The Eiffel Tower is in Paris. The Colosseum is in Rome. Where is the Eiffel Tower?",
                          return_tensors="pt")["input_ids"]
    spans = [(0, 7), (7, 14), (14, input_ids.shape[1] - 1)]
    expected_rows = _eager_rows(eager, input_ids, [input_ids.shape[1] - 2, input_ids.shape[1] - 1])
    for aggregate in ("sum", "mean", "max"):
        scores = passage_attention_scores(model, input_ids, spans, query_positions=[-2, -1], aggregate=aggregate)
        expected = aggregate_spans(expected_rows, spans, aggregate).mean(dim=2)
        assert scores.shape == (30, 9, 3)
        assert torch.allclose(scores, expected, atol=TOLERANCE), aggregate


def test_layer_subset_stops_early_with_the_same_rows_tiny_random():
    sdpa, _ = _sdpa_and_eager(_tiny_configs()["llama"])
    input_ids = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(2))
    every_layer = query_attention_rows(sdpa, input_ids)
    first_two = query_attention_rows(sdpa, input_ids, layers=[1, 0])
    assert first_two.shape[0] == 2
    assert torch.equal(first_two, every_layer[:2])


def test_tap_leaves_the_model_and_registry_unchanged_tiny_random():
    sdpa, _ = _sdpa_and_eager(_tiny_configs()["qwen2"])
    original_kernel = _attention_registry()["sdpa"]
    input_ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        before = sdpa(input_ids=input_ids).logits
    query_attention_rows(sdpa, input_ids)
    with torch.no_grad():
        after = sdpa(input_ids=input_ids).logits
    assert _attention_registry()["sdpa"] is original_kernel
    assert torch.equal(before, after)


def test_eager_model_is_refused_with_advice_tiny_random():
    _, eager = _sdpa_and_eager(_tiny_configs()["llama"])
    with pytest.raises(AttentionAccessError, match="attn_implementation='sdpa'"):
        query_attention_rows(eager, torch.tensor([[1, 2, 3]]))


def test_bad_positions_and_spans_are_refused_tiny_random():
    sdpa, _ = _sdpa_and_eager(_tiny_configs()["gpt2"])
    input_ids = torch.tensor([[1, 2, 3, 4]])
    with pytest.raises(AttentionAccessError, match="outside a sequence of 4 tokens"):
        query_attention_rows(sdpa, input_ids, query_positions=[7])
    with pytest.raises(AttentionAccessError, match="No passage spans"):
        passage_attention_scores(sdpa, input_ids, spans=[])
    with pytest.raises(AttentionAccessError, match="outside 4 tokens"):
        passage_attention_scores(sdpa, input_ids, spans=[(2, 9)])


def test_char_spans_map_to_the_tokens_of_each_passage(smollm2):
    _, tokenizer = smollm2
    first, second = "Paris is the capital of France.", "Berlin is the capital of Germany."
    text = f"Passages:\n{first}\n{second}\nQuestion?"
    char_spans = [
        (text.index(first), text.index(first) + len(first)),
        (text.index(second), text.index(second) + len(second)),
    ]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = token_spans_from_char_spans(encoded["offset_mapping"], char_spans)
    decoded = [tokenizer.decode(encoded["input_ids"][a:b]).strip() for a, b in spans]
    assert decoded == [first, second]
    with pytest.raises(AttentionAccessError, match="No token covers"):
        token_spans_from_char_spans(encoded["offset_mapping"], [(len(text) + 5, len(text) + 9)])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_rows_taken_during_generation_match_eager_on_the_full_sequence_tiny_random(family):
    from icr2_components.models.attention import generation_passage_scores

    sdpa, eager = _sdpa_and_eager(_tiny_configs()[family])
    prompt = torch.randint(3, 128, (1, 30), generator=torch.Generator().manual_seed(4))
    spans = [(0, 10), (10, 20), (20, 29)]
    scores, generated = generation_passage_scores(
        sdpa, prompt, spans, max_new_tokens=5, aggregate="sum", pad_token_id=0
    )
    count = generated.shape[1]
    assert 1 <= count <= 5
    full = torch.cat([prompt, generated], dim=1)
    # The prefill gives the last prompt token's row; each decoding step the row of the token it feeds back.
    positions = list(range(29, 29 + count))
    expected = aggregate_spans(_eager_rows(eager, full, positions), spans, "sum").mean(dim=2)
    assert torch.allclose(scores, expected, atol=TOLERANCE)


def test_tap_switches_only_the_tapped_model_and_never_the_global_sdpa_tiny_random():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from icr2_components.models.attention import attention_taps

    tapped_model, _ = _sdpa_and_eager(_tiny_configs()["llama"])
    other_model, _ = _sdpa_and_eager(_tiny_configs()["qwen2"])  # a second model loaded in the same process
    assert _attention_registry()["sdpa"] is sdpa_attention_forward
    input_ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        other_before = other_model(input_ids=input_ids).logits
    seen = []
    with attention_taps(tapped_model, lambda call: seen.append(call.module)) as modules, torch.no_grad():
        assert tapped_model.config._attn_implementation == "icr2_tapped_sdpa"
        assert attention_implementation(tapped_model) == "sdpa"
        assert other_model.config._attn_implementation == "sdpa"
        assert _attention_registry()["sdpa"] is sdpa_attention_forward
        other_during = other_model(input_ids=input_ids).logits
        assert seen == []  # the other model's attention calls never reach the tap
        tapped_model(input_ids=input_ids)
        assert seen == modules
    assert tapped_model.config._attn_implementation == "sdpa"
    assert _attention_registry()["sdpa"] is sdpa_attention_forward
    assert torch.equal(other_before, other_during)


def test_the_model_kernel_sees_its_own_implementation_name_under_the_tap_tiny_random():
    """The flash kernel reads ``module.config._attn_implementation``; under the tap it must still read its own."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    names_seen = []

    def recording_sdpa(module, *args, **kwargs):
        names_seen.append(module.config._attn_implementation)
        return sdpa_attention_forward(module, *args, **kwargs)

    AttentionInterface.register("icr2_test_recording_sdpa", recording_sdpa)
    model, _ = _sdpa_and_eager(_tiny_configs()["llama"])
    input_ids = torch.randint(0, 128, (1, 10), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        plain = query_attention_rows(model, input_ids)
    model.config._attn_implementation = "icr2_test_recording_sdpa"
    recorded = query_attention_rows(model, input_ids)
    assert names_seen == ["icr2_test_recording_sdpa"] * 3
    assert model.config._attn_implementation == "icr2_test_recording_sdpa"
    assert torch.allclose(recorded, plain, atol=TOLERANCE)
