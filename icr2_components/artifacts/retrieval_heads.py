"""The retrieval-head artifact: what probing found, saved as JSON, plus a layer x head heatmap.

It records everything that must match at inference for the heads to mean what they meant when probed: the
model (name and shape), the prompt template, the query-position mode and the aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icr2_components.artifacts.base import ArtifactMismatchError, HeadArtifactIO

ARTIFACT_FORMAT = "icr2-retrieval-heads/1"
__all__ = ["ARTIFACT_FORMAT", "ArtifactMismatchError", "RetrievalHeadArtifact"]


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
    prompt_template: str = "icr2_components.text.templates.render_cic_prompt"
    probed_ids: list[str] | None = None  # the probed questions' ids (None: not recorded); see artifacts.base
    probed_ids_note: str = ""  # how probed_ids were obtained when the probe did not record them itself
    format: str = ARTIFACT_FORMAT

    def __post_init__(self) -> None:
        if self.m < 1 or self.q < 1:
            raise ValueError(f"An artifact needs M >= 1 and Q >= 1, got M={self.m}, Q={self.q}.")
        if len(self.heads) != self.q:
            raise ValueError(f"The artifact lists {len(self.heads)} heads but Q={self.q}.")
        for name in ("heads", "ranking"):
            for pair in getattr(self, name):
                if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                        or any(isinstance(i, bool) or not isinstance(i, int) for i in pair)):
                    raise ValueError(f"The artifact's {name} holds {pair!r}, not a [layer, head] pair of integers.")
        self.check_heads(self.model_signature["num_layers"], self.model_signature["num_heads"], "the probed model")
        # the selected heads are the ranking's first Q: the filter uses the ranking, so two lists that differ
        # would mean heads other than those the artifact names
        if [list(h) for h in self.heads] != [list(h) for h in self.ranking[: self.q]]:
            raise ValueError(
                f"The artifact's heads {self.heads} are not its ranking's first Q={self.q} "
                f"{self.ranking[: self.q]}; the file was edited or damaged. Probe again with `icr2 probe-heads`."
            )
        if self.probed_ids is not None and (not isinstance(self.probed_ids, list)
                                            or not all(isinstance(i, str) for i in self.probed_ids)):
            raise ValueError("probed_ids must be a list of question id strings (or None: not recorded).")

    def check_heads(self, num_layers: int, num_heads: int, model: str) -> None:
        """Every head the artifact names (selected and ranked) lies within ``num_layers`` x ``num_heads``.

        :param model: what the shape is of, for the message (the probed model, or the loaded reader at warm-up).
        :raises ValueError: a head outside that shape, named with the shape.
        """
        for name in ("heads", "ranking"):
            for layer, head in getattr(self, name):
                if not (0 <= layer < num_layers and 0 <= head < num_heads):
                    raise ValueError(
                        f"The artifact's {name} name layer {layer}, head {head}, outside {model}'s {num_layers} "
                        f"layers x {num_heads} heads (layers 0-{num_layers - 1}, heads 0-{num_heads - 1}); "
                        "probe this reader again with `icr2 probe-heads`."
                    )

    def head_hit_rate(self, layer: int, head: int, m: int | None = None) -> float:
        return self.hit_rates[(m or self.m) - 1][layer][head]

    def top_heads(self, q: int | None = None) -> list[tuple[int, int]]:
        """The best ``q`` heads (the artifact's Q by default; up to the stored ranking)."""
        q = q or self.q
        if q > len(self.ranking):
            raise ValueError(
                f"num_heads (Q) is {q}, more heads than the artifact ranks ({len(self.ranking)}); use at most "
                f"{len(self.ranking)}, or probe again with a larger --rank."
            )
        return [(int(layer), int(head)) for layer, head in self.ranking[:q]]
