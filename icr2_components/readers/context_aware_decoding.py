"""Context-aware decoding rules as pure torch functions over next-token logits (CAD, ACD, COIECD).

Each rule takes the next-token logits of the same step computed twice, with the context (``context_logits``,
z_c: the prompt with the passages) and without it (``memory_logits``, z_m: the same question alone), and
returns the logits to decode from. All accept any leading batch shape ``(..., vocab)``. With weight 0 every
rule returns ``context_logits`` itself (bit for bit), so greedy decoding reproduces the plain reader.

CUB (Hagström et al., 2025) names these techniques but gives no formulas; the CAD and ACD formulas below are
the original papers' as we know them (written from memory of the papers, not checked against their text here);
COIECD's follows the authors' released code:

- CAD, Shi et al. 2023, "Trusting Your Evidence": ``(1 + a) * z_c - a * z_m`` (contrast the output with and
  without the context; ``a = 0`` is plain decoding).
- ACD, Kim et al. 2024, "Adaptive Contrastive Decoding in RAG": ``z_m + w_t * (z_c - z_m)`` with the
  entropy-based weight ``w_t = H(p_m) / (H(p_m) + H(p_c))``: a context that makes the model confident (low
  H(p_c)) pulls the mix toward the context, an uninformative (e.g. irrelevant) one leaves it with memory. Our
  ``weight`` interpolates between plain decoding (0) and the paper's rule (1): ``z_c + weight * (acd - z_c)``.
- COIECD, Yuan et al. 2024, "Discerning and Resolving Knowledge Conflicts through Adaptive Decoding with
  Contextual Information-Entropy Constraint" (Findings of ACL 2024). Re-implemented from the method as the
  authors' released code (github.com/Stacy027/COIECD, ``decoding.py``) defines it; the paper's full text was not
  at hand here (CUB's summary in shared/papers names COIECD but gives no formula). See ``coiecd_logits``: at
  every step a contextual information-entropy constraint with ratio lambda splits the vocabulary into tokens
  that satisfy it (no conflict) and tokens that violate it (conflict); conflicting tokens are scored
  ``lp_c + alpha * g`` and the others ``lp_m + alpha * g``, with the contextual contrastive term
  ``g = lp_c - lp_m`` (log-probabilities). Our ``weight`` interpolates, as for ACD, between plain decoding (0)
  and that rule (1).
"""

from __future__ import annotations

import math

import torch

TECHNIQUES = ("none", "cad", "acd", "coiecd")
"""Decoding techniques by name: ``none`` is plain greedy decoding with the context."""


def _check(context_logits: torch.Tensor, memory_logits: torch.Tensor, weight: float, name: str) -> None:
    if context_logits.shape != memory_logits.shape:
        raise ValueError(
            f"{name}: context and memory logits must have one shape, got {tuple(context_logits.shape)} and "
            f"{tuple(memory_logits.shape)} (same model and tokenizer for both passes)."
        )
    if weight < 0:
        raise ValueError(f"{name}: the weight must be >= 0, got {weight}.")


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of ``softmax(logits)`` over the last axis: shape ``(...)``, float32."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def cad_logits(context_logits: torch.Tensor, memory_logits: torch.Tensor, alpha: float) -> torch.Tensor:
    """CAD: ``(1 + alpha) * z_c - alpha * z_m``; ``alpha = 0`` returns ``context_logits`` unchanged."""
    _check(context_logits, memory_logits, alpha, "cad")
    if alpha == 0:
        return context_logits
    return (1 + alpha) * context_logits - alpha * memory_logits


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
    _check(context_logits, memory_logits, weight, "acd")
    w_t = acd_mixing_weight(context_logits, memory_logits)
    if weight == 0:
        return context_logits, w_t
    z_c, z_m = context_logits.float(), memory_logits.float()
    mixed = z_m + w_t.unsqueeze(-1) * (z_c - z_m)
    return (z_c + weight * (mixed - z_c)).to(context_logits.dtype), w_t


COIECD_ALPHA = 1.0
"""COIECD's alpha (weight of the contextual contrastive term) in the authors' released code."""

COIECD_BOUND_RATIO = 4.0
"""COIECD's lambda (ratio of the constraint's bounds to the extremes) in the authors' released code."""


def check_coiecd_settings(alpha: float, bound_ratio: float) -> None:
    """Refuse COIECD settings outside the method's domain (alpha >= 0, lambda >= 1), saying which to change."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"coiecd: alpha (the contrastive term's weight) must be a finite number >= 0, got {alpha!r}.")
    if (isinstance(bound_ratio, bool) or not isinstance(bound_ratio, (int, float)) or not math.isfinite(bound_ratio)
            or bound_ratio < 1):
        raise ValueError(
            f"coiecd: bound_ratio (lambda) must be a finite number >= 1, got {bound_ratio!r}; 1 makes every token "
            f"satisfy the constraint (no conflict anywhere), larger values flag more tokens ({COIECD_BOUND_RATIO:g} "
            "in the authors' code)."
        )


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
    _check(context_logits, memory_logits, weight, "coiecd")
    check_coiecd_settings(alpha, bound_ratio)
    conflict = coiecd_constraint(context_logits, memory_logits, bound_ratio)
    if weight == 0:
        return context_logits, conflict
    lp_c = torch.log_softmax(context_logits.float(), dim=-1)
    lp_m = torch.log_softmax(memory_logits.float(), dim=-1)
    contrast = alpha * (lp_c - lp_m)
    rule = torch.where(conflict, lp_c + contrast, lp_m + contrast)
    return (lp_c + weight * (rule - lp_c)).to(context_logits.dtype), conflict


def apply_technique(
    technique: str,
    context_logits: torch.Tensor,
    memory_logits: torch.Tensor,
    alpha: float,
    coiecd_alpha: float = COIECD_ALPHA,
    coiecd_bound_ratio: float = COIECD_BOUND_RATIO,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dispatch by name; returns the logits to decode from and the step's diagnostics (floats, batch-averaged).

    ``alpha`` is the technique's weight (0 = plain decoding); ``coiecd_alpha`` and ``coiecd_bound_ratio`` are
    COIECD's alpha and lambda. COIECD reports ``conflict``: whether the greedy token violates the constraint.
    """
    if technique == "cad":
        return cad_logits(context_logits, memory_logits, alpha), {}
    if technique == "acd":
        logits, w_t = acd_logits(context_logits, memory_logits, alpha)
        return logits, {"acd_context_weight": float(w_t.float().mean())}
    if technique == "coiecd":
        logits, conflict = coiecd_logits(context_logits, memory_logits, alpha, coiecd_alpha, coiecd_bound_ratio)
        chosen = conflict.gather(-1, logits.argmax(dim=-1, keepdim=True))
        return logits, {"conflict": float(chosen.float().mean())}
    if technique == "none":
        return context_logits, {}
    raise ValueError(f"Unknown decoding technique {technique!r}; choose one of {list(TECHNIQUES)}.")
