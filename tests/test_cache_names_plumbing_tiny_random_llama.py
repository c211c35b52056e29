"""Plumbing, on a tiny randomly initialised Llama built from its config (no model files): the key/value cache is
passed and read under the name the installed transformers gives it (``models.cache_names``), so a forward continued
from a kept cache gives the logits of the whole prompt run at once, and the old name (``past_key_values``, deprecated
in transformers 5.2x) is not used where the new one exists."""

from __future__ import annotations

import inspect

import pytest

from icr2_components.models.cache_names import (
    NEW_NAME,
    OLD_NAME,
    forward_cache_keyword,
    generate_cache_keyword,
    output_cache,
)

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_random_llama():
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_the_keyword_follows_the_installed_forward_signature(tiny_random_llama):
    takes_new = NEW_NAME in inspect.signature(type(tiny_random_llama).forward).parameters
    assert forward_cache_keyword(tiny_random_llama) == (NEW_NAME if takes_new else OLD_NAME)
    assert generate_cache_keyword() in (NEW_NAME, OLD_NAME)


def test_a_forward_continued_from_the_kept_cache_gives_the_whole_prompts_logits(tiny_random_llama):
    model = tiny_random_llama
    ids = torch.tensor([[3, 9, 14, 27, 5, 41, 8]])
    with torch.no_grad():
        whole = model(input_ids=ids, use_cache=False).logits[0, -1]
        first = model(input_ids=ids[:, :5], use_cache=True)
        kept = output_cache(first)
        assert kept is not None and kept.get_seq_length() == 5
        continued = model(input_ids=ids[:, 5:], use_cache=True, **{forward_cache_keyword(model): kept})
    assert torch.allclose(continued.logits[0, -1], whole, atol=1e-5)
    assert output_cache(continued).get_seq_length() == 7


def test_an_output_without_a_cache_gives_none(tiny_random_llama):
    with torch.no_grad():
        output = tiny_random_llama(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)
    assert output_cache(output) is None
