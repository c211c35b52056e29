"""The retrieval-head artifact: what probing found, saved as JSON, plus a layer x head heatmap.

It records everything that must match at inference for the heads to mean what they meant when probed: the
model (name and shape), the prompt template, the query-position mode and the aggregation.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ARTIFACT_FORMAT = "icr2-retrieval-heads/1"


class ArtifactMismatchError(ValueError):
    """The artifact was probed on another model (or another template) than the one it is used with."""


@dataclass
class RetrievalHeadArtifact:
    """Probed retrieval heads.

    ``heads`` are the selected Q heads, best first, as ``[layer, head]``; ``ranking`` keeps more heads in order
    so that Q can be raised at inference without probing again. ``hit_rates[m - 1][layer][head]`` for
    M = 1..len(hit_rates).
    """

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

    def check_model(self, model_name: str, signature: dict[str, Any]) -> None:
        """Refuse a reader other than the probed one: different weights give different retrieval heads."""
        from icr2_components.models.resolver import resolve_model

        same_name = model_name == self.model or resolve_model(model_name) == resolve_model(self.model)
        if not same_name or signature != self.model_signature:
            raise ArtifactMismatchError(
                f"These retrieval heads were probed on {self.model} ({_describe(self.model_signature)}) but the reader "
                f"is {model_name} ({_describe(signature)}). Probe this reader with `icr2 probe-heads --model "
                f"{model_name}` and use that artifact."
            )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RetrievalHeadArtifact":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"Retrieval-head artifact not found: {path}. Make one with `icr2 probe-heads`.")
        data = json.loads(path.read_text())
        if data.get("format") != ARTIFACT_FORMAT:
            raise ValueError(f"{path} is not a retrieval-head artifact (format {data.get('format')!r}, expected {ARTIFACT_FORMAT!r}).")
        return cls(**data)


def _describe(signature: dict[str, Any]) -> str:
    return f"{signature.get('architecture')}, {signature.get('num_layers')} layers x {signature.get('num_heads')} heads"


def plot_hit_rate_heatmap(artifact: RetrievalHeadArtifact, path: str | os.PathLike, m: int | None = None) -> Path:
    """A layer x head heatmap of hit rates at M, the selected heads outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    m = m or artifact.m
    rates = artifact.hit_rates[m - 1]
    layers, heads = len(rates), len(rates[0])
    figure, axis = plt.subplots(figsize=(max(4, heads * 0.6 + 2), max(4, layers * 0.25 + 1.5)))
    image = axis.imshow(rates, aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower")
    for layer, head in artifact.heads:
        axis.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    axis.set_xticks(range(heads))
    chance = artifact.chance_hit_rates[m - 1]
    axis.set_title(f"{artifact.model}: hit rate @M={m} ({artifact.instances} instances, chance {chance:.2f})", fontsize=9)
    figure.colorbar(image, ax=axis, label="hit rate")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
