"""ACD, adaptive contrastive decoding: an entropy-weighted mix of the distributions with and without the context.

Kim et al. (2024), "Adaptive Contrastive Decoding in Retrieval-Augmented Generation for Handling Noisy Contexts",
https://arxiv.org/abs/2409.07394: ``z_m + w_t * (z_c - z_m)`` with the entropy-based weight
``w_t = H(p_m) / (H(p_m) + H(p_c))``: a context that makes the model confident (low H(p_c)) pulls the mix toward
the context, an uninformative (e.g. irrelevant) one leaves it with memory. The reader's weight is ours, not the
paper's: it interpolates between plain decoding (0) and the paper's rule (1), ``z_c + weight * (acd - z_c)``.
"""

from __future__ import annotations

from icr2_components.extras import extra_import
from icr2_components.readers.decoding_rules.base import DecodingRule, check_logit_pair, entropy
from icr2_components.readers.decoding_rules.registry import register_decoding_rule

with extra_import("local") as torch_import:
    import torch


def acd_mixing_weight(context_logits: torch.Tensor, memory_logits: torch.Tensor) -> torch.Tensor:
    """ACD's per-step weight of the context, ``H(p_m) / (H(p_m) + H(p_c))`` in [0, 1]: shape ``(...)``.

    Both entropies zero (two one-hot distributions) gives 0.5.
    """
    h_context, h_memory = entropy(context_logits), entropy(memory_logits)
    total = h_context + h_memory
    return torch.where(total > 0, h_memory / total.clamp_min(1e-12), torch.full_like(total, 0.5))


def acd_logits(
    context_logits: torch.Tensor, memory_logits: torch.Tensor, weight: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """ACD: ``(z_c + weight * (mix - z_c), w_t)`` with ``mix = z_m + w_t * (z_c - z_m)``.

    ``weight = 1`` is the paper's rule; ``weight = 0`` returns ``context_logits`` unchanged. The second value is
    ACD's entropy weight ``w_t`` (for reporting).
    """
    check_logit_pair(context_logits, memory_logits, weight, "acd")
    w_t = acd_mixing_weight(context_logits, memory_logits)
    if weight == 0:
        return context_logits, w_t
    z_c, z_m = context_logits.float(), memory_logits.float()
    mixed = z_m + w_t.unsqueeze(-1) * (z_c - z_m)
    return (z_c + weight * (mixed - z_c)).to(context_logits.dtype), w_t


@register_decoding_rule("acd")
class AdaptiveContrastiveDecoding(DecodingRule):
    """ACD (https://arxiv.org/abs/2409.07394) as a decoding rule; reports ``acd_context_weight``, the mean w_t.

    Usage example:
    ```python
    from icr2_components.readers.decoding_rules import decoding_rule

    logits, diagnostics = decoding_rule("acd").combine(context_logits, memory_logits, weight=1.0)
    print(diagnostics["acd_context_weight"])
    ```
    """

    def combine(self, context_logits, memory_logits, weight):
        logits, w_t = acd_logits(context_logits, memory_logits, weight)
        return logits, {"acd_context_weight": float(w_t.float().mean())}
