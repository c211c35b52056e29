"""Gate artifacts: what ``icr2 train-gate`` learns from labelled questions, saved beside the pipeline that uses it.

Two kinds, one JSON file each (no pickle; a nearest-neighbour gate keeps its training vectors in a ``.npz`` beside
the JSON, read with ``allow_pickle=False``):

- **calibrated threshold** (``kind: threshold``): the P(yes) cut of the gate's ``threshold`` method, picked on
  labelled dev questions for a stated objective (answer match - lambda x retrieval rate).
- **learned** (``kind: logistic`` or ``knn``): a need-for-retrieval model over the question's embedding (the
  bundled MiniLM) and cheap signals (date/recency words, the top BM25 score of the index), with the cut on its
  probability picked for the same objective.

A knn artifact records what its ``.npz`` holds (``vectors_record``: the file's SHA-256, its vector rows and
dimensions and how many of its labels say "needs retrieval"); reading the vectors (``knn_vectors``) checks the file
against that record and against the training counts, and refuses one that disagrees, naming both files and what
differs, instead of scoring with another gate's vectors or labels. An artifact written before the record existed is
still checked for the counts it has and read with a warning.

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

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icr2_components.resources import shipped_names
from icr2_components.resources.lookup import resolve_file
from icr2_components.strict_mapping import check_known_keys, dataclass_from_mapping

logger = logging.getLogger(__name__)

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
    vectors_record: dict[str, Any] | None = None
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
        if self.kind == "logistic" and len(self.feature_scale) != len(self.feature_mean):
            raise ValueError("A logistic gate artifact needs one scale per feature (feature_scale and feature_mean "
                             "differ in length); train it again.")
        if self.kind == "knn" and (not self.vectors_file or self.knn_k < 1):
            raise ValueError("A knn gate artifact needs vectors_file and knn_k >= 1; train it again.")
        if self.vectors_record is not None and not (
                isinstance(self.vectors_record, dict) and isinstance(self.vectors_record.get("sha256"), str)
                and all(isinstance(self.vectors_record.get(k), int) for k in ("rows", "dims", "needs_retrieval"))):
            raise ValueError("A gate artifact's vectors_record holds sha256, rows, dims and needs_retrieval; train it "
                             "again.")

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
        # every key against its declared type (strict: no NaN or infinity in a cut or a weight, no "0.5" for 0.5)
        return dataclass_from_mapping(cls, data, str(path), ValueError)

    def vectors_path(self, artifact_path: str | os.PathLike) -> Path:
        """The ``.npz`` of a knn artifact, relative to the JSON file's folder."""
        return artifact_file(artifact_path).parent / str(self.vectors_file)

    def knn_vectors(self, artifact_path: str | os.PathLike) -> tuple[Any, Any]:
        """``(vectors, labels)`` of a knn artifact's ``.npz``, checked against the artifact (module docstring).

        :raises ValueError: the file is not the ``.npz`` train-gate wrote, or disagrees with the artifact (rows
            against labels or the training count, labels that are not 0/1 or count other needs, other dimensions
            or another SHA-256 than recorded): one line naming both files and what differs.
        """
        import numpy as np

        json_path = artifact_file(artifact_path)
        npz = self.vectors_path(artifact_path)
        vectors, labels = read_vectors_file(npz)

        def refuse(what: str) -> ValueError:
            return ValueError(f"The knn gate's vectors file {npz} disagrees with {json_path}: {what}. Train the gate "
                              "again with icr2 train-gate (it writes both files together).")

        if vectors.ndim != 2 or labels.ndim != 1:
            raise refuse(f"vectors of shape {list(vectors.shape)} and labels of shape {list(labels.shape)} (expected "
                         "a matrix and a list)")
        if vectors.shape[0] != labels.shape[0]:
            raise refuse(f"it holds {vectors.shape[0]} vector rows against {labels.shape[0]} labels")
        if not np.isin(labels, (0.0, 1.0)).all() or not np.isfinite(vectors).all():
            raise refuse("its labels are not all 0 or 1, or its vectors hold NaN or infinity")
        fitted = self.training.get("fitted")
        if isinstance(fitted, int) and vectors.shape[0] != fitted:
            raise refuse(f"it holds {vectors.shape[0]} vectors, the artifact was trained on {fitted} questions")
        needs = self.training.get("needs_retrieval")
        if isinstance(needs, int) and int(labels.sum()) != needs:
            raise refuse(f"{int(labels.sum())} of its labels say 'needs retrieval', the artifact's training counted "
                         f"{needs}")
        record = self.vectors_record
        if record is None:
            logger.warning("%s records no vectors_record (written before gate artifacts recorded their vectors), "
                           "so %s is checked by its counts only; train the gate again to record it", json_path, npz)
            return vectors, labels
        if [vectors.shape[0], vectors.shape[1]] != [record.get("rows"), record.get("dims")]:
            raise refuse(f"its vectors are {vectors.shape[0]} x {vectors.shape[1]}, the artifact records "
                         f"{record.get('rows')} x {record.get('dims')}")
        digest = file_sha256(npz)
        if digest != record.get("sha256"):
            raise refuse(f"its SHA-256 is {digest[:16]}..., the artifact records {str(record.get('sha256'))[:16]}... "
                         "(the vectors or labels were changed or replaced after training)")
        return vectors, labels





def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def vectors_record(npz: str | os.PathLike) -> dict[str, Any]:
    """What a knn artifact records of the ``.npz`` just written beside it (``GateArtifact.knn_vectors`` checks it)."""
    vectors, labels = read_vectors_file(Path(npz))
    return {"sha256": file_sha256(npz), "rows": int(vectors.shape[0]), "dims": int(vectors.shape[1]),
            "needs_retrieval": int(labels.sum())}


def read_vectors_file(path: Path) -> tuple[Any, Any]:
    """The ``vectors`` and ``labels`` arrays of a knn gate's ``.npz`` (float64), or one line saying why not."""
    import zipfile

    import numpy as np

    if not path.is_file():
        raise FileNotFoundError(f"The knn gate's vectors are missing: {path} (written beside the artifact by "
                                "icr2 train-gate); train it again.")
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"PK\x03\x04":  # not a .npz (a zip): numpy would speak of allow_pickle instead
        raise ValueError(f"The knn gate's vectors file {path} is not a .npz archive (it does not start like a zip "
                         "file): it is damaged or was replaced. Train the gate again with icr2 train-gate.")
    try:
        with np.load(path, allow_pickle=False) as data:
            return np.asarray(data["vectors"], dtype=np.float64), np.asarray(data["labels"], dtype=np.float64)
    except (KeyError, ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile) as error:  # cut or foreign
        raise ValueError(f"The knn gate's vectors file {path} cannot be read as the vectors and labels "
                         f"icr2 train-gate writes ({type(error).__name__}: {error}). Train the gate again.") from error


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


__all__ = [
    "FORMAT",
    "KINDS",
    "LEARNED_KINDS",
    "MAKE_WITH",
    "GateArtifact",
    "artifact_file",
    "file_sha256",
    "load_gate_artifact",
    "read_vectors_file",
    "vectors_record",
]
