"""Context-aware decoding rules as pure torch functions over next-token logits (CAD, ACD, COIECD).

Each rule takes the next-token logits of the same step computed twice, with the context (``context_logits``,
z_c: the prompt with the passages) and without it (``memory_logits``, z_m: the same question alone), and
returns the logits to decode from. All accept any leading batch shape ``(..., vocab)``. With weight 0 every
rule returns ``context_logits`` itself (bit for bit), so greedy decoding reproduces the plain reader.

CUB (Hagström et al., 2025) names these techniques but gives no formulas; the formulas below are the original
papers' as we know them (written from memory of the papers, not checked against their text here):

- CAD, Shi et al. 2023, "Trusting Your Evidence": ``(1 + a) * z_c - a * z_m`` (contrast the output with and
  without the context; ``a = 0`` is plain decoding).
- ACD, Kim et al. 2024, "Adaptive Contrastive Decoding in RAG": ``z_m + w_t * (z_c - z_m)`` with the
  entropy-based weight ``w_t = H(p_m) / (H(p_m) + H(p_c))``: a context that makes the model confident (low
  H(p_c)) pulls the mix toward the context, an uninformative (e.g. irrelevant) one leaves it with memory. Our
  ``weight`` interpolates between plain decoding (0) and the paper's rule (1): ``z_c + weight * (acd - z_c)``.
- COIECD, Yuan et al. 2024, "Discerning and Resolving Knowledge Conflicts through Adaptive Decoding with
  Contextual Information-Entropy Constraint": detect, at each step, whether the context and the memory
  conflict, and apply the contrastive correction only then. The paper's constraint is token-level, against a
  stable-entropy band; ours is a per-step simplification, stated so that it can be tested: the step is a
  *conflict* when the two distributions' top tokens differ; when the context is informative there (it lowers
  the entropy by at least ``threshold`` nats: ``H(p_m) - H(p_c) >= threshold``) the conflict is resolved toward
  the context with CAD's contrast (``(1 + a) * lp_c - a * lp_m``, log-probabilities), otherwise toward memory
  (``lp_c + min(a, 1) * (lp_m - lp_c)``). Steps without conflict keep ``z_c``.
"""

from __future__ import annotations

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


def coiecd_conflict(context_logits: torch.Tensor, memory_logits: torch.Tensor) -> torch.Tensor:
    """Per-step conflict: the contextual and the parametric distributions disagree on the top token: ``(...)`` bool."""
    return context_logits.argmax(dim=-1) != memory_logits.argmax(dim=-1)


def coiecd_logits(
    context_logits: torch.Tensor, memory_logits: torch.Tensor, alpha: float = 1.0, threshold: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """COIECD (per-step form, see the module docstring): ``(logits, conflict, toward_context)``.

    ``conflict``: the step's top tokens differ; ``toward_context``: the conflict was resolved for the context
    (entropy drop ``H(p_m) - H(p_c) >= threshold``) rather than for memory. ``alpha = 0`` returns
    ``context_logits`` unchanged.
    """
    _check(context_logits, memory_logits, alpha, "coiecd")
    conflict = coiecd_conflict(context_logits, memory_logits)
    informative = (entropy(memory_logits) - entropy(context_logits)) >= threshold
    toward_context = conflict & informative
    if alpha == 0:
        return context_logits, conflict, toward_context
    lp_c = torch.log_softmax(context_logits.float(), dim=-1)
    lp_m = torch.log_softmax(memory_logits.float(), dim=-1)
    contrast = (1 + alpha) * lp_c - alpha * lp_m
    to_memory = lp_c + min(alpha, 1.0) * (lp_m - lp_c)
    resolved = torch.where(toward_context.unsqueeze(-1), contrast, to_memory)
    out = torch.where(conflict.unsqueeze(-1), resolved, context_logits.float())
    return out.to(context_logits.dtype), conflict, toward_context


def apply_technique(
    technique: str, context_logits: torch.Tensor, memory_logits: torch.Tensor, alpha: float, threshold: float = 0.5
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dispatch by name; returns the logits to decode from and the step's diagnostics (floats, batch-averaged)."""
    if technique == "cad":
        return cad_logits(context_logits, memory_logits, alpha), {}
    if technique == "acd":
        logits, w_t = acd_logits(context_logits, memory_logits, alpha)
        return logits, {"acd_context_weight": float(w_t.float().mean())}
    if technique == "coiecd":
        logits, conflict, toward = coiecd_logits(context_logits, memory_logits, alpha, threshold)
        return logits, {"conflict": float(conflict.float().mean()), "toward_context": float(toward.float().mean())}
    if technique == "none":
        return context_logits, {}
    raise ValueError(f"Unknown decoding technique {technique!r}; choose one of {list(TECHNIQUES)}.")
