"""Probe a reader on validation instances and write the artifact and heatmap (what `icr2 probe-heads` runs)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.filters.probing.head_probing import CiCInstance, ProbeResult, artifact_from_probe, probe_heads
from icr2_components.models.introspection import model_signature
from icr2_components.plotting import plot_hit_rate_heatmap


@dataclass
class ProbeOutcome:
    artifact: RetrievalHeadArtifact
    result: ProbeResult
    artifact_path: Path | None
    heatmap_path: Path | None


def choose_instances(instances: Sequence[CiCInstance], limit: int | None, seed: int = 0) -> list[CiCInstance]:
    """``limit`` instances drawn at random with ``seed`` (ICR2 F.2 probes on 100 random validation instances)."""
    chosen = list(instances)
    if limit is not None and limit < len(chosen):
        chosen = random.Random(seed).sample(chosen, limit)
    return chosen


def probe_to_artifact(
    instances: Sequence[CiCInstance],
    model: str,
    m: int = 1,
    q: int = 4,
    max_m: int = 8,
    query_position_mode: str = "last_prompt_token",
    aggregate: str = "sum",
    query_aware: bool = False,
    dtype: str = "auto",
    device: str | None = None,
    max_context_tokens: int | None = None,
    generation_tokens: int = 6,
    artifact_path: str | Path | None = None,
    heatmap_path: str | Path | None = None,
    progress: bool = True,
) -> ProbeOutcome:
    """Probe ``model`` (from the shared cache) on ``instances``, select Q heads at M, save what was asked for."""
    from icr2_components.models.cache import MODEL_CACHE

    if not instances:
        raise ValueError("No validation instances to probe; check the benchmark file (and --limit).")
    if m > max_m:
        raise ValueError(f"M={m} is larger than max_m={max_m}; probe up to at least M.")
    task_types = {instance.task_type for instance in instances}
    if len(task_types) > 1:
        raise ValueError(f"Instances mix task types {sorted(task_types)}; probe one task type at a time.")
    loaded, tokenizer = MODEL_CACHE.causal_lm(model, dtype=dtype, device=device, attn_implementation="sdpa")
    result = probe_heads(
        loaded,
        tokenizer,
        instances,
        max_m=max_m,
        query_position_mode=query_position_mode,
        aggregate=aggregate,
        query_aware=query_aware,
        max_context_tokens=max_context_tokens,
        generation_tokens=generation_tokens,
        progress=progress,
    )
    artifact = artifact_from_probe(
        result, model, model_signature(loaded), m, q, task_type=task_types.pop(), query_aware=query_aware,
        query_position_mode=query_position_mode, aggregate=aggregate, generation_tokens=generation_tokens,
    )
    saved = artifact.save(artifact_path) if artifact_path else None
    plotted = plot_hit_rate_heatmap(artifact, heatmap_path) if heatmap_path else None
    return ProbeOutcome(artifact, result, saved, plotted)
