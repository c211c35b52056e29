"""Gate artifacts: what ``icr2 train-gate`` learns from labelled questions, saved beside the pipeline that uses it.

Two kinds, one JSON file each (no pickle; a nearest-neighbour gate keeps its training vectors in a ``.npz`` beside
the JSON, read with ``allow_pickle=False``):

- **calibrated threshold** (``kind: threshold``): the P(yes) cut of the gate's ``threshold`` method, picked on
  labelled dev questions for a stated objective (answer match - lambda x retrieval rate).
- **learned** (``kind: logistic`` or ``knn``): a need-for-retrieval model over the question's embedding (the
  bundled MiniLM) and cheap signals (date/recency words, the top BM25 score of the index), with the cut on its
  probability picked for the same objective.

Every gate artifact records the ids of the questions it was trained or calibrated on as ``probed_ids`` (the key
head artifacts use, ``artifacts.base``): a pipeline whose gate names the artifact (init parameter ``artifact``)
is then kept off those questions by ``icr2 compare`` (``evaluation.compare.held_out``), and ``icr2 eval-gate`` refuses
labelled questions that overlap them.

Usage:
    >>> from icr2_components.artifacts.gate_artifact import GateArtifact
    >>> artifact = GateArtifact.load("pipelines/adaptive_rag.gate.json")
    >>> artifact.kind, artifact.cut, len(artifact.probed_ids)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icr2_components.resources import resolve_file, shipped_names
from icr2_components.strict_mapping import check_known_keys

FORMAT = "icr2-gate/1"
KINDS = ("threshold", "logistic", "knn")
LEARNED_KINDS = ("logistic", "knn")
MAKE_WITH = "icr2 train-gate LABELS --kind {threshold|logistic|knn} --out ARTIFACT.json"


@dataclass
class GateArtifact:
    """A calibrated or learned gate (module docstring). ``cut``: retrieve when the gate's score reaches it."""

    kind: str
    cut: float
    objective: dict[str, Any]
    probed_ids: list[str]
    reader: str = ""
    gate_model: str | None = None
    embedding_model: str | None = None
    signals: list[str] = field(default_factory=list)
    index: str | None = None
    weights: list[float] = field(default_factory=list)
    bias: float = 0.0
    feature_mean: list[float] = field(default_factory=list)
    feature_scale: list[float] = field(default_factory=list)
    knn_k: int = 0
    vectors_file: str | None = None
    labels_file: str | None = None
    labels_sha256: str | None = None
    training: dict[str, Any] = field(default_factory=dict)
    probed_ids_note: str = "the labelled questions this gate was trained or calibrated on (icr2 train-gate)"
    format: str = FORMAT

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise ValueError(f"Not a gate artifact (format {self.format!r}, expected {FORMAT!r}); make one with "
                             f"{MAKE_WITH}.")
        if self.kind not in KINDS:
            raise ValueError(f"A gate artifact's kind is one of {KINDS}, got {self.kind!r}.")
        if not isinstance(self.cut, (int, float)) or isinstance(self.cut, bool):
            raise ValueError(f"A gate artifact's cut must be a number, got {self.cut!r}.")
        if not isinstance(self.probed_ids, list) or not all(isinstance(i, str) for i in self.probed_ids):
            raise ValueError("A gate artifact's probed_ids must be a list of question id strings.")
        if self.kind in LEARNED_KINDS and not self.embedding_model:
            raise ValueError(f"A {self.kind} gate artifact needs its embedding_model.")
        if self.kind == "logistic" and len(self.weights) != len(self.feature_mean):
            raise ValueError("A logistic gate artifact needs one weight per feature (weights and feature_mean differ "
                             "in length); train it again.")
        if self.kind == "knn" and (not self.vectors_file or self.knn_k < 1):
            raise ValueError("A knn gate artifact needs vectors_file and knn_k >= 1; train it again.")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> GateArtifact:
        path = artifact_file(path)
        if not path.is_file():
            raise FileNotFoundError(f"Gate artifact not found: {path}. Make one with {MAKE_WITH}, or name a shipped "
                                    f"one ({', '.join(shipped_names('artifacts'))}).")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path} is not JSON ({error.msg}, line {error.lineno}); make it with {MAKE_WITH}."
            ) from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a gate artifact (a JSON object); make one with {MAKE_WITH}.")
        check_known_keys(data, cls.__dataclass_fields__, str(path), hint="It is not a gate artifact of this version.")
        try:
            return cls(**data)
        except TypeError as error:
            raise ValueError(f"{path} is not a complete gate artifact ({error}); make it with {MAKE_WITH}.") from None

    def vectors_path(self, artifact_path: str | os.PathLike) -> Path:
        """The ``.npz`` of a knn artifact, relative to the JSON file's folder."""
        return artifact_file(artifact_path).parent / str(self.vectors_file)





def artifact_file(value: str | os.PathLike) -> Path:
    """The file a gate's ``artifact`` reads: ``value`` when a file is there, else the shipped artifact of that name
    (``adaptive_rag.learned``), else ``value`` as a path (whose absence the caller reports)."""
    try:
        return resolve_file("artifacts", value)
    except FileNotFoundError:
        return Path(value)


def load_gate_artifact(path: str | os.PathLike, kinds: tuple[str, ...], method: str) -> GateArtifact:
    """The artifact at ``path``, refused (one line) when it is of another kind than gate ``method`` uses."""
    artifact = GateArtifact.load(path)
    if artifact.kind not in kinds:
        raise ValueError(f"{path} is a {artifact.kind} gate artifact; method {method!r} reads {' or '.join(kinds)} "
                         f"artifacts ({MAKE_WITH}).")
    return artifact
__all__ = ["FORMAT", "GateArtifact", "artifact_file", "KINDS", "LEARNED_KINDS", "MAKE_WITH", "load_gate_artifact"]
