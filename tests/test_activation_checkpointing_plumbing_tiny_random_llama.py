"""Plumbing, on a tiny randomly initialised Llama built from its config (no model files): the recipes'
``gradient_checkpointing`` reaches ``TrainingArguments`` and the joint trainer's model under the installed
transformers' names (``activation_checkpointing`` since 5.2x), with the non-reentrant kwargs, and without the
deprecation warning the old names give."""

from __future__ import annotations

import warnings

import pytest

from icr2_components.training.activation_checkpointing import enable_on, training_arguments_for

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("enabled", [True, False])
def test_training_arguments_turn_checkpointing_on_or_off_without_a_deprecation(enabled, tmp_path):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*checkpointing.*deprecated", category=FutureWarning)
        arguments = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True,
                                                   **training_arguments_for(enabled))
    assert arguments.gradient_checkpointing is enabled  # the old name mirrors the new one, whichever was given
    if enabled:
        kwargs = getattr(arguments, "activation_checkpointing_kwargs", None) or arguments.gradient_checkpointing_kwargs
        assert kwargs == {"use_reentrant": False}


def test_the_model_is_checkpointed_with_the_non_reentrant_kwargs():
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).train()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*checkpointing.*deprecated", category=FutureWarning)
        enable_on(model)
        on = getattr(model, "is_activation_checkpointing", None)
    assert on if on is not None else model.is_gradient_checkpointing
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()  # checkpointed layers recompute in the backward pass: gradients reach the first layer
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
