"""What a loaded causal LM says about itself: its identity (for head artifacts) and its context length.

Every component that reads a model's config for these goes through here, so a model family that names its
context length differently (GPT-2's ``n_positions``) is handled once for the readers, the RAP filter, the
retrieval-head ranker and training alike.

Usage example:
```python
from icr2_components.models import MODEL_CACHE
from icr2_components.models.introspection import context_limit, model_signature

model, _ = MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")
print(context_limit(model), model_signature(model)["num_layers"])  # 8192 30
```
"""

from __future__ import annotations

from typing import Any

from icr2_components.errors import ContextTooLongError

CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
"""Config attributes that state a model's context length, by the name each model family uses."""

UNSTATED_CONTEXT_LIMIT = 1 << 30
"""The limit used for a model whose config states none: effectively no limit (generation fails where it fails)."""


def stated_context_length(config) -> int | None:
    """The context length ``config`` states under any of ``CONTEXT_LENGTH_KEYS``; None when it states none."""
    for name in CONTEXT_LENGTH_KEYS:
        value = getattr(config, name, None)
        if value:
            return int(value)
    return None


def context_limit(model, max_tokens: int | None = None) -> int:
    """The most tokens ``model`` takes: ``max_tokens`` when given, else its config's context length."""
    if max_tokens:
        return int(max_tokens)
    return stated_context_length(model.config) or UNSTATED_CONTEXT_LIMIT


def check_fits(prompt_tokens: int, limit: int, reserved: int, model_name: str) -> None:
    """Refuse a passage prompt of ``prompt_tokens`` that, with ``reserved`` tokens kept free, exceeds ``limit``."""
    if prompt_tokens + reserved > limit:
        raise ContextTooLongError(
            f"The passages make a {prompt_tokens}-token prompt, but {model_name} takes at most {limit} tokens"
            + (f" ({reserved} kept free for generated tokens)" if reserved else "")
            + ". Give fewer or shorter passages (a smaller corpus budget).",
            prompt_tokens=prompt_tokens, limit=limit,
        )


def model_signature(model) -> dict[str, Any]:
    """What must match for heads probed (or trained) on one model to mean anything on another."""
    config = model.config
    return {
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "num_layers": int(getattr(config, "num_hidden_layers", None) or config.n_layer),
        "num_heads": int(getattr(config, "num_attention_heads", None) or config.n_head),
        "hidden_size": int(getattr(config, "hidden_size", None) or config.n_embd),
        "vocab_size": int(config.vocab_size),
    }
