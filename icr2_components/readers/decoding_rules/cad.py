"""CAD, context-aware decoding: contrast the output with and without the context.

Shi et al. (2023), "Trusting Your Evidence: Hallucinate Less with Context-aware Decoding",
https://arxiv.org/abs/2305.14739: ``(1 + a) * z_c - a * z_m``; ``a = 0`` is plain decoding. The reader's weight
is ``a``.
"""

from __future__ import annotations

from icr2_components.extras import extra_import
from icr2_components.readers.decoding_rules.base import DecodingRule, check_logit_pair
from icr2_components.readers.decoding_rules.registry import register_decoding_rule

with extra_import("local") as torch_import:
    import torch


def cad_logits(context_logits: torch.Tensor, memory_logits: torch.Tensor, alpha: float) -> torch.Tensor:
    """CAD: ``(1 + alpha) * z_c - alpha * z_m``; ``alpha = 0`` returns ``context_logits`` unchanged."""
    check_logit_pair(context_logits, memory_logits, alpha, "cad")
    if alpha == 0:
        return context_logits
    return (1 + alpha) * context_logits - alpha * memory_logits


@register_decoding_rule("cad")
class ContextAwareDecoding(DecodingRule):
    """CAD (https://arxiv.org/abs/2305.14739) as a decoding rule: the weight is CAD's alpha; no other parameters.

    Usage example:
    ```python
    from icr2_components.readers.decoding_rules import decoding_rule

    logits, diagnostics = decoding_rule("cad").combine(context_logits, memory_logits, weight=0.5)
    ```
    """

    def combine(self, context_logits, memory_logits, weight):
        return cad_logits(context_logits, memory_logits, weight), {}
