"""Gumbel-TopK (Kool et al., 2019) with a relaxed k-hot mask, and the temperature schedule of joint training.

Forward: the hard top-K of the Gumbel-perturbed scores (a 0/1 mask with exactly K ones). Backward: the
gradient of a continuous relaxation (K successive tempered softmaxes, each excluding what earlier ones took,
as in Xie & Ermon 2019), passed straight through.
"""

from __future__ import annotations

import math

import torch


def gumbel_noise(shape, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    uniform = torch.rand(shape, generator=generator, device=device).clamp(1e-9, 1 - 1e-9)
    return -torch.log(-torch.log(uniform))


def relaxed_topk(logits: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """A soft k-hot vector summing to ``k`` (for k <= n): K tempered softmaxes, each masking the mass taken."""
    khot = torch.zeros_like(logits)
    onehot = torch.zeros_like(logits)
    current = logits
    for _ in range(k):
        current = current + torch.log((1.0 - onehot).clamp_min(1e-20))
        onehot = torch.softmax(current / tau, dim=-1)
        khot = khot + onehot
    return khot


def gumbel_topk(scores: torch.Tensor, k: int, tau: float, hard: bool = True, noise: bool = True,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """A differentiable K-of-n selection mask over the last axis of ``scores``.

    Usage:
        >>> mask = gumbel_topk(torch.tensor([2.0, 0.1, 1.5, -1.0]), k=2, tau=0.5)   # e.g. [1., 0., 1., 0.]
    """
    if k < 1:
        raise ValueError(f"K must be >= 1, got {k}.")
    if tau <= 0:
        raise ValueError(f"The temperature must be > 0, got {tau}.")
    n = scores.shape[-1]
    if k >= n:
        return torch.ones_like(scores)
    perturbed = scores + gumbel_noise(scores.shape, generator, scores.device) if noise else scores
    soft = relaxed_topk(perturbed, k, tau)
    if not hard:
        return soft
    index = torch.topk(perturbed, k, dim=-1).indices
    hard_mask = torch.zeros_like(scores).scatter(-1, index, 1.0)
    return hard_mask - soft.detach() + soft


def temperature(step: int, total_steps: int, start: float, end: float, schedule: str = "exponential") -> float:
    """tau at ``step`` of ``total_steps``: exponential or linear decay from ``start`` to ``end``, or constant."""
    if schedule == "constant" or total_steps <= 1:
        return float(start)
    fraction = min(max(step / (total_steps - 1), 0.0), 1.0)
    if schedule == "linear":
        return float(start + (end - start) * fraction)
    if schedule == "exponential":
        return float(start * math.exp(math.log(end / start) * fraction))
    raise ValueError(f"Unknown temperature schedule {schedule!r}; choose exponential, linear or constant.")
