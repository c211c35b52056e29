"""The PH3 head artifact: per-head attribution scores, the context and memory heads, saved as JSON (like RAP's).

It records what must match at inference for the heads to mean what they meant when probed: the model (name and
shape), the prompt template and the probing method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icr2_components.artifacts.base import HeadArtifactIO

PH3_FORMAT = "icr2-ph3-heads/1"
DIRECTIONS = ("context", "memory")
"""``context``: PH3 +context, suppress the memory heads; ``memory``: PH3 +memory, suppress the context heads."""


@dataclass
class PH3HeadArtifact(HeadArtifactIO):
    """Probed heads. ``scores[layer][head]``: mean direct effect on ``logit(t_context) - logit(t_memory)`` at the
    answer position over the probed conflicting instances; ``context_heads`` (most positive first) push toward
    the context's answer, ``memory_heads`` (most negative first) toward the model's memory."""

    FORMAT = PH3_FORMAT
    KIND = "PH3"
    MAKE_WITH = "icr2_components.filters.probing.ph3_probing.probe_ph3_heads, or bench/cmt_matrix.py"

    model: str
    model_signature: dict[str, Any]
    method: str
    scores: list[list[float]]
    context_heads: list[list[int]]
    memory_heads: list[list[int]]
    instances: int
    skipped: dict[str, Any] = field(default_factory=dict)
    prompt_template: str = "icr2_components.text.templates.render_cic_prompt"
    probed_ids: list[str] | None = None  # the probed questions' ids (None: not recorded); see artifacts.base
    probed_ids_note: str = ""  # how probed_ids were obtained when the probe did not record them itself
    format: str = PH3_FORMAT

    def __post_init__(self) -> None:
        layers, heads = self.model_signature["num_layers"], self.model_signature["num_heads"]
        if len(self.scores) != layers or any(len(row) != heads for row in self.scores):
            raise ValueError(f"scores must be {layers} layers x {heads} heads.")
        for layer, head in self.context_heads + self.memory_heads:
            if not (0 <= layer < layers and 0 <= head < heads):
                raise ValueError(f"Head ({layer}, {head}) is outside the model's {layers} layers x {heads} heads.")
        if self.probed_ids is not None and (not isinstance(self.probed_ids, list)
                                            or not all(isinstance(i, str) for i in self.probed_ids)):
            raise ValueError("probed_ids must be a list of question id strings (or None: not recorded).")

    def heads_to_suppress(self, direction: str, count: int) -> list[tuple[int, int]]:
        """PH3 +context suppresses the top ``count`` memory heads; +memory the top ``count`` context heads."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}.")
        ranking = self.memory_heads if direction == "context" else self.context_heads
        if not 0 <= count <= len(ranking):
            raise ValueError(f"count must be between 0 and {len(ranking)} (the heads the artifact ranks), got {count}.")
        return [(int(layer), int(head)) for layer, head in ranking[:count]]
