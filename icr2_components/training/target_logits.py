"""The SFT loss with the output layer applied only where a target token is predicted.

A corpus-in-context example is ~1,000 prompt tokens and ~10-150 target tokens, and the loss is taken on the
target only (labels are -100 on the prompt). A causal LM's forward nevertheless projects every position onto the
vocabulary: for SmolLM2-135M (49,152 x 576) that is about a fifth of the forward's FLOPs and a (T x 49,152) fp32
logits tensor, all thrown away by the loss. transformers' ``logits_to_keep`` takes the positions to keep, so the
model projects only the positions whose next token is a target (the union over the batch, so one index serves
every row). The loss is the same sum of cross-entropies over the same tokens, divided by the same count, as
``model(**inputs).loss`` (checked by tests/test_training_throughput.py).
"""

from __future__ import annotations

from typing import Any

IGNORE_INDEX = -100


def target_positions(labels):
    """Sequence positions ``t`` whose next token ``t + 1`` is a target in any row of the batch."""
    return (labels[:, 1:] != IGNORE_INDEX).any(dim=0).nonzero().squeeze(-1)


def target_only_loss(model, inputs: dict[str, Any], num_items_in_batch=None, return_outputs: bool = False):
    """Cross-entropy of the target tokens, projecting only the positions that predict them.

    :param num_items_in_batch: the target tokens of the whole accumulated batch (Trainer passes it so that
        gradient accumulation averages over tokens, not micro-batches); None: the mean over this batch.
    :returns: the loss, or ``(loss, outputs)`` with ``return_outputs``.
    """
    import torch.nn.functional as F

    labels = inputs["labels"]
    keep = target_positions(labels)
    forward = {k: v for k, v in inputs.items() if k != "labels"}
    outputs = model(**forward, logits_to_keep=keep)
    logits = outputs.logits.float()
    targets = labels[:, 1:][:, keep]
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX,
                            reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE_INDEX).sum()
    loss = total / count
    return (loss, outputs) if return_outputs else loss
