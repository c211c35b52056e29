"""Attention-head suppression (PH3) and per-head outputs, through the attention access's kernel tap.

A tap on the attention kernel (see ``attention.py``) sees each layer's call; for the layers with chosen heads it
runs the model's own kernel itself (``AttentionCall.run_kernel``) and scales those heads' outputs (0 by default:
PH3's pruning, Jin et al. 2024, "Cutting Off the Head Ends the Conflict") before they reach the output
projection ``o_proj``. Other heads, other layers and every call outside the context are untouched. The kernel
output is ``(batch, q_len, query_heads, head_dim)`` for every kernel transformers dispatches to (sdpa, flash,
flex).

Usage:
    >>> from icr2_components.models import MODEL_CACHE
    >>> from icr2_components.models.head_suppression import suppress_heads
    >>> model, tokenizer = MODEL_CACHE.causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu")
    >>> with suppress_heads(model, [(12, 3), (20, 0)]):
    ...     output = model.generate(**tokenizer("The capital of France is", return_tensors="pt"), max_new_tokens=4)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch

from icr2_components.models.attention import (
    AttentionAccessError,
    AttentionCall,
    attention_modules,
    attention_taps,
)


def model_shape(model) -> tuple[int, int]:
    """``(layers, query_heads)`` of a decoder, from its attention modules and config."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if heads is None:
        raise AttentionAccessError(f"{type(model).__name__}'s config names no num_attention_heads.")
    return len(attention_modules(model)), int(heads)


def check_heads(model, heads: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    """Normalise ``[(layer, head), ...]`` and refuse indices outside the model (a clear error, never a no-op)."""
    layers, per_layer = model_shape(model)
    checked = []
    for item in heads:
        if len(item) != 2:
            raise AttentionAccessError(f"A head is a (layer, head) pair, got {item!r}.")
        layer, head = int(item[0]), int(item[1])
        if not 0 <= layer < layers or not 0 <= head < per_layer:
            raise AttentionAccessError(
                f"Head ({layer}, {head}) is out of range: {type(model).__name__} has layers 0..{layers - 1} and "
                f"heads 0..{per_layer - 1} per layer."
            )
        checked.append((layer, head))
    return sorted(set(checked))


class HeadSuppressionTap:
    """Scales the outputs of chosen heads (0: removed) per layer; also usable with a capture of head outputs."""

    def __init__(self, heads: Sequence[tuple[int, int]], scale: float = 0.0,
                 capture_positions: Sequence[int] | None = None) -> None:
        self.scale = float(scale)
        self.by_layer: dict[int, list[int]] = {}
        for layer, head in heads:
            self.by_layer.setdefault(layer, []).append(head)
        self.capture_positions = list(capture_positions) if capture_positions is not None else None
        self.captured: dict[int, torch.Tensor] = {}

    def __call__(self, call: AttentionCall):
        chosen = self.by_layer.get(call.layer)
        if not chosen and self.capture_positions is None:
            return None  # the original kernel runs, untouched
        output, weights = call.run_kernel()
        if chosen:
            output = output.clone()
            output[:, :, chosen, :] = output[:, :, chosen, :] * self.scale
        if self.capture_positions is not None:
            self.captured[call.layer] = output[:, self.capture_positions].detach().float().cpu()
        return output, weights


@contextmanager
def suppress_heads(model, heads: Iterable[Sequence[int]], scale: float = 0.0) -> Iterator[list[tuple[int, int]]]:
    """Scale the outputs of ``heads`` (``[(layer, head)]``) by ``scale`` (0: PH3 pruning) while the context is open.

    Yields the checked heads. No heads installs a pass-through tap: the model computes exactly as without it.
    Heads outside the model raise :class:`AttentionAccessError`.
    """
    checked = check_heads(model, heads)
    if not 0 <= scale <= 1:
        raise AttentionAccessError(f"scale must lie in [0, 1] (0 removes the head, 1 leaves it), got {scale}.")
    tap = HeadSuppressionTap(checked, scale)
    with attention_taps(model, tap):
        yield checked


def head_outputs(model, input_ids: torch.Tensor, positions: Sequence[int] = (-1,),
                 heads: Iterable[Sequence[int]] = (), scale: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head attention outputs before ``o_proj`` at ``positions``, with ``heads`` suppressed.

    Returns ``(outputs, logits)``: outputs (layers, batch, P, query_heads, head_dim) float32 on CPU, and the
    next-token logits of the last position (batch, vocab).
    """
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    tap = HeadSuppressionTap(check_heads(model, heads), scale, capture_positions=positions)
    with attention_taps(model, tap), torch.inference_mode():
        logits = model(input_ids=input_ids.to(model.device), use_cache=False, logits_to_keep=1).logits[:, -1, :]
    return torch.stack([tap.captured[layer] for layer in sorted(tap.captured)]), logits.float().cpu()
