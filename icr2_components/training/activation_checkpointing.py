"""Activation (gradient) checkpointing under the installed transformers' names.

transformers 5.2x renamed ``gradient_checkpointing`` to ``activation_checkpointing``: the ``TrainingArguments``
fields (``..._checkpointing``, ``..._checkpointing_kwargs``) and the model's ``..._checkpointing_enable``. The old
names still work there with a deprecation warning and go in v6; the recipes keep their one key,
``training.gradient_checkpointing``, and these pass it on under whichever name the version has.
"""

from __future__ import annotations

import inspect
from typing import Any

# non-reentrant checkpointing: what the recipes have always asked for (it works with frozen inputs, as under LoRA)
CHECKPOINT_KWARGS = {"use_reentrant": False}


def training_arguments_for(enabled: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords that turn checkpointing on or off.

    :returns: ``{"activation_checkpointing": enabled, ...}`` (``gradient_...`` before the rename), with the
        non-reentrant kwargs when ``enabled``.
    """
    from transformers import TrainingArguments

    prefix = ("activation" if "activation_checkpointing" in inspect.signature(TrainingArguments.__init__).parameters
              else "gradient")
    arguments: dict[str, Any] = {f"{prefix}_checkpointing": enabled}
    if enabled:
        arguments[f"{prefix}_checkpointing_kwargs"] = dict(CHECKPOINT_KWARGS)
    return arguments


def enable_on(model: Any) -> None:
    """Turn checkpointing on for ``model`` (``activation_checkpointing_enable``, else the old name)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))


__all__ = ["enable_on", "training_arguments_for"]
