"""Loading a *trainable* copy of a reader (never the shared inference copy held by MODEL_CACHE).

Training changes weights in place; the process-wide cache hands one object to every component naming a
model, so training on it would silently change the generator, the RAP filter and the ranker of a running
pipeline. Training therefore loads its own copy from the resolved folder.
"""

from __future__ import annotations

from typing import Any

from icr2_components.models.introspection import CONTEXT_LENGTH_KEYS, stated_context_length
from icr2_components.models.resolver import resolve_model


class SequenceLimitError(ValueError):
    """``max_seq_length`` is longer than the model's context."""


def effective_max_length(config, requested: int | None) -> int:
    """The recipe's ``max_seq_length``, or the model's context when unset; refuses more than the model allows."""
    limit = stated_context_length(config)
    if limit is None:
        if requested is not None:
            return int(requested)  # nothing to check it against
        raise ValueError(
            f"{type(config).__name__} states no context length (none of {list(CONTEXT_LENGTH_KEYS)}); "
            "set max_seq_length in the recipe."
        )
    if requested is None:
        return limit
    if requested > limit:
        raise SequenceLimitError(
            f"max_seq_length={requested} is longer than the model's context ({limit} tokens, "
            "max_position_embeddings). Lower max_seq_length, or extend the context first (rope scaling) and "
            "set max_position_embeddings accordingly."
        )
    return int(requested)


def set_rope_theta(config, theta: float) -> None:
    """Set the rotary base (ICR2 F.1 uses 1e6): ``rope_parameters`` in transformers 5, ``rope_theta`` before."""
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict):
        parameters["rope_theta"] = float(theta)
    else:
        config.rope_theta = float(theta)


def load_trainable(
    model: str,
    dtype: str = "float32",
    attn_implementation: str = "sdpa",
    rope_theta: float | None = None,
    device: str | None = None,
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a fresh trainable copy from ``resolve_model(model)`` (see the module docstring)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(model, check_available=True)
    config = AutoConfig.from_pretrained(path)
    if rope_theta:
        set_rope_theta(config, rope_theta)
    loaded = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=getattr(torch, dtype),
                                                  attn_implementation=attn_implementation)
    if device:
        loaded.to(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return loaded, tokenizer
