"""COIECD: resolve knowledge conflicts only where a contextual information-entropy constraint detects one.

Yuan et al. (2024), "Discerning and Resolving Knowledge Conflicts through Adaptive Decoding with Contextual
Information-Entropy Constraint" (Findings of ACL 2024), https://arxiv.org/abs/2402.11893, as the authors'
released code (github.com/Stacy027/COIECD, ``decoding.py``) defines the method. At every step a constraint with
ratio lambda splits the vocabulary into tokens that satisfy it (no conflict) and tokens that violate it
(conflict); conflicting tokens are scored ``lp_c + alpha * g`` and the others ``lp_m + alpha * g``, with the
contextual contrastive term ``g = lp_c - lp_m`` (log-probabilities). The reader's weight interpolates, as for
ACD, between plain decoding (0) and that rule (1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from icr2_components.extras import extra_import
from icr2_components.readers.decoding_rules.base import DecodingRule, check_logit_pair, entropy
from icr2_components.readers.decoding_rules.registry import register_decoding_rule

with extra_import("local") as torch_import:
    import torch

COIECD_ALPHA = 1.0
"""COIECD's alpha (weight of the contextual contrastive term) in the authors' released code."""

COIECD_BOUND_RATIO = 4.0
"""COIECD's lambda (ratio of the constraint's bounds to the extremes) in the authors' released code."""


def _is_finite_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class COIECDParameters:
    """COIECD's own parameters, the paper's alpha and lambda (defaults: the authors' code's).

    Usage example: `COIECDParameters(alpha=1.0, bound_ratio=4.0)`; the reader takes them as `coiecd_alpha` and
    `coiecd_bound_ratio`.

    :param alpha: The weight of the contextual contrastive term ``log p_c - log p_m`` in both resolutions
        (conflicting and non-conflicting tokens), >= 0.
    :param bound_ratio: lambda, the ratio of the constraint's bounds to the extremes, >= 1; 1 detects no
        conflict, larger values flag more tokens.
    """

    alpha: float = COIECD_ALPHA
    bound_ratio: float = COIECD_BOUND_RATIO

    def __post_init__(self) -> None:
        if not _is_finite_number(self.alpha) or self.alpha < 0:
            raise ValueError(
                f"coiecd: alpha (the contrastive term's weight) must be a finite number >= 0, got {self.alpha!r}."
            )
        if not _is_finite_number(self.bound_ratio) or self.bound_ratio < 1:
            raise ValueError(
                f"coiecd: bound_ratio (lambda) must be a finite number >= 1, got {self.bound_ratio!r}; 1 makes every "
                f"token satisfy the constraint (no conflict anywhere), larger values flag more tokens "
                f"({COIECD_BOUND_RATIO:g} in the authors' code)."
            )
        # frozen: normalise ints from YAML to the floats the rule computes with
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "bound_ratio", float(self.bound_ratio))


def coiecd_constraint(context_logits: torch.Tensor, memory_logits: torch.Tensor, bound_ratio: float) -> torch.Tensor:
    """COIECD's contextual information-entropy constraint: ``(..., vocab)`` bool, True where a token *violates* it.

    Built as the authors' code builds it, from the information content of each token under the context,
    ``-log p_c(y)``, shifted by the entropy ``H(p_m)`` of the parametric (no-context) distribution and normalised
    over the vocabulary, ``q = softmax(-log p_c - H(p_m))``. With ``lambda = bound_ratio`` the bounds are
    ``L = lambda * min q`` and ``U = max q / lambda``; a token conflicts when ``q(y) < L`` or ``q(y) > U``.
    One exception, also the code's: when a single token is below ``L`` (the context's top token stands alone)
    that token is not flagged, so a decisive context is not a conflict by itself.

    Choices where the method leaves room (stated so that they can be checked):

    - no absolute value in the shift (locally typical sampling scores ``|I(y) - H|``; the released code does
      not). ``H`` is then one constant per step, which the normalisation removes: the constraint depends on
      ``p_c`` alone, and is equivalent to ``p_c(y) > max p_c / lambda`` (with at least two such tokens) or
      ``p_c(y) < lambda * min p_c``. Whether ``H`` is the contextual or the parametric entropy therefore does
      not change the result; we use the parametric one, as the code does. The shift is kept so that the code
      reads as the method is written (a test pins the equivalence).
    - bounds compared as the code does: ``q >= L`` and ``q <= U`` satisfy the constraint.
    - the single-violator exception is decided per row (the code decides it over its batch of one).
    """
    log_context = torch.log_softmax(context_logits.float(), dim=-1)
    parametric_entropy = entropy(memory_logits).unsqueeze(-1)
    log_q = torch.log_softmax(-log_context - parametric_entropy, dim=-1)
    log_ratio = math.log(bound_ratio)
    below = log_q < log_q.amin(dim=-1, keepdim=True) + log_ratio
    above = log_q > log_q.amax(dim=-1, keepdim=True) - log_ratio
    lone = below.sum(dim=-1, keepdim=True) == 1
    return (below & ~lone) | above


def coiecd_logits(
    context_logits: torch.Tensor,
    memory_logits: torch.Tensor,
    weight: float = 1.0,
    alpha: float = COIECD_ALPHA,
    bound_ratio: float = COIECD_BOUND_RATIO,
) -> tuple[torch.Tensor, torch.Tensor]:
    """COIECD: ``(logits, conflict)``, ``conflict`` being the ``(..., vocab)`` mask of ``coiecd_constraint``.

    With ``lp_c``, ``lp_m`` the log-probabilities with and without the context and the contextual contrastive
    term ``g = lp_c - lp_m``, the method scores each token by whether it conflicts:

    - conflict (violates the constraint): ``lp_c + alpha * g``, CAD's contrast, resolving toward the context;
    - no conflict (satisfies it): ``lp_m + alpha * g``, the parametric distribution moved toward the context
      (``alpha = 1`` gives ``lp_c`` itself: plain decoding on those tokens).

    :param weight: Ours, not the paper's: ``lp_c + weight * (rule - lp_c)``; 1 is the method, 0 returns
        ``context_logits`` unchanged (plain decoding, bit for bit), values between interpolate.
    :param alpha: The paper's alpha, the weight of the contrastive term ``g`` in both resolutions (>= 0).
    :param bound_ratio: The paper's lambda, the constraint's bound ratio (>= 1); see ``coiecd_constraint``.
    """
    check_logit_pair(context_logits, memory_logits, weight, "coiecd")
    COIECDParameters(alpha, bound_ratio)
    conflict = coiecd_constraint(context_logits, memory_logits, bound_ratio)
    if weight == 0:
        return context_logits, conflict
    lp_c = torch.log_softmax(context_logits.float(), dim=-1)
    lp_m = torch.log_softmax(memory_logits.float(), dim=-1)
    contrast = alpha * (lp_c - lp_m)
    rule = torch.where(conflict, lp_c + contrast, lp_m + contrast)
    return (lp_c + weight * (rule - lp_c)).to(context_logits.dtype), conflict


@register_decoding_rule("coiecd")
class ContextualInformationEntropyConstraintDecoding(DecodingRule):
    """COIECD (https://arxiv.org/abs/2402.11893) as a decoding rule, with `COIECDParameters`; reports
    ``conflict``: whether the greedy token violates the constraint (batch-averaged).

    Usage example:
    ```python
    from icr2_components.readers.decoding_rules import decoding_rule
    from icr2_components.readers.decoding_rules.coiecd import COIECDParameters

    rule = decoding_rule("coiecd", COIECDParameters(alpha=1.0, bound_ratio=4.0))
    logits, diagnostics = rule.combine(context_logits, memory_logits, weight=1.0)
    print(diagnostics["conflict"])
    ```
    """

    parameters_class = COIECDParameters

    def combine(self, context_logits, memory_logits, weight):
        logits, conflict = coiecd_logits(context_logits, memory_logits, weight, self.parameters.alpha,
                                         self.parameters.bound_ratio)
        chosen = conflict.gather(-1, logits.argmax(dim=-1, keepdim=True))
        return logits, {"conflict": float(chosen.float().mean())}
