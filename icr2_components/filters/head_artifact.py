"""The retrieval-head artifact: what probing found, saved as JSON, plus a layer x head heatmap.

It records everything that must match at inference for the heads to mean what they meant when probed: the
model (name and shape), the prompt template, the query-position mode and the aggregation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icr2_components.models.head_artifact_io import ArtifactMismatchError, HeadArtifactIO, plot_layer_head_heatmap

ARTIFACT_FORMAT = "icr2-retrieval-heads/1"
__all__ = ["ARTIFACT_FORMAT", "ArtifactMismatchError", "RetrievalHeadArtifact", "plot_hit_rate_heatmap"]


@dataclass
class RetrievalHeadArtifact(HeadArtifactIO):
    """Probed retrieval heads.

    ``heads`` are the selected Q heads, best first, as ``[layer, head]``; ``ranking`` keeps more heads in order
    so that Q can be raised at inference without probing again. ``hit_rates[m - 1][layer][head]`` for
    M = 1..len(hit_rates).
    """

    FORMAT = ARTIFACT_FORMAT
    KIND = "retrieval-head"
    MAKE_WITH = "`icr2 probe-heads`"

    model: str
    model_signature: dict[str, Any]
    task_type: str
    query_aware: bool
    query_position_mode: str
    aggregate: str
    m: int
    q: int
    heads: list[list[int]]
    ranking: list[list[int]]
    hit_rates: list[list[list[float]]]
    chance_hit_rates: list[float]
    instances: int
    skipped: dict[str, Any] = field(default_factory=dict)
    generation_tokens: int = 6
    prompt_template: str = "icr2_components.builders.templates.render_cic_prompt"
    format: str = ARTIFACT_FORMAT

    def __post_init__(self) -> None:
        if self.m < 1 or self.q < 1:
            raise ValueError(f"An artifact needs M >= 1 and Q >= 1, got M={self.m}, Q={self.q}.")
        if len(self.heads) != self.q:
            raise ValueError(f"The artifact lists {len(self.heads)} heads but Q={self.q}.")
        layers, heads = self.model_signature["num_layers"], self.model_signature["num_heads"]
        for layer, head in self.ranking:
            if not (0 <= layer < layers and 0 <= head < heads):
                raise ValueError(f"Head ({layer}, {head}) is outside the model's {layers} layers x {heads} heads.")

    @classmethod
    def from_probe(
        cls,
        result,
        model: str,
        signature: dict[str, Any],
        m: int,
        q: int,
        task_type: str = "qa",
        query_aware: bool = False,
        query_position_mode: str = "last_prompt_token",
        aggregate: str = "sum",
        rank: int = 32,
        generation_tokens: int = 6,
    ) -> "RetrievalHeadArtifact":
        """Select the top ``q`` heads at ``m`` from a :class:`ProbeResult` and record how they were found."""
        from icr2_components.filters.head_probing import select_heads

        if not 1 <= m <= result.hit_rates.shape[0]:
            raise ValueError(f"M={m} was not probed (probed M = 1..{result.hit_rates.shape[0]}); raise --max-m.")
        ranking = select_heads(result.hit_rates[m - 1], max(q, min(rank, result.hit_rates[0].numel())))
        return cls(
            model=model,
            model_signature=signature,
            task_type=task_type,
            query_aware=query_aware,
            query_position_mode=query_position_mode,
            aggregate=aggregate,
            m=m,
            q=q,
            heads=[list(h) for h in ranking[:q]],
            ranking=[list(h) for h in ranking],
            hit_rates=[[[round(float(v), 6) for v in row] for row in layer] for layer in result.hit_rates.tolist()],
            chance_hit_rates=[round(c, 6) for c in result.chance],
            instances=len(result.instances),
            skipped=result.skips.as_dict(),
            generation_tokens=generation_tokens,
        )

    def head_hit_rate(self, layer: int, head: int, m: int | None = None) -> float:
        return self.hit_rates[(m or self.m) - 1][layer][head]

    def top_heads(self, q: int | None = None) -> list[tuple[int, int]]:
        """The best ``q`` heads (the artifact's Q by default; up to the stored ranking)."""
        q = q or self.q
        if q > len(self.ranking):
            raise ValueError(f"Q={q} is more heads than the artifact ranks ({len(self.ranking)}); probe again with a larger --rank.")
        return [(int(layer), int(head)) for layer, head in self.ranking[:q]]


def plot_hit_rate_heatmap(artifact: RetrievalHeadArtifact, path: str | os.PathLike, m: int | None = None) -> Path:
    """A layer x head heatmap of hit rates at M, the selected heads outlined."""
    m = m or artifact.m
    chance = artifact.chance_hit_rates[m - 1]
    return plot_layer_head_heatmap(
        artifact.hit_rates[m - 1], [(artifact.heads, "red")],
        f"{artifact.model}: hit rate @M={m} ({artifact.instances} instances, chance {chance:.2f})",
        path, cmap="viridis", vmin=0, vmax=1, colorbar_label="hit rate",
    )
