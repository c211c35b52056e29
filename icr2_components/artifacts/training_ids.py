"""The question ids a fine-tuned artifact learned from: ``training_ids.json`` beside its weights.

Every training run writes one into each folder it produces (the SFT model folder, a LoRA adapter folder, the
retrieval head folder and, for joint training, its output folder): the ids of the examples it trained on and of
the validation examples that chose its checkpoint (early stopping, best model), the data files and a ``run_id``
unique to the run. ``icr2 compare`` (``evaluation.compare.held_out``) finds these files through the paths a pipeline's
components read (a reader's ``model``, a ranker's ``head``) and keeps those questions out of the evaluation
exactly as it does for probed heads; the ``run_id`` puts the run in the pipeline's hash, so a reader retrained
at the same path is answered again instead of read from the cache.

A folder that holds ``training_summary.json`` (written by ``icr2 train``) but no ``training_ids.json`` was
trained before the ids were kept: its held-out status cannot be known, so it is refused.

Usage:
    >>> write_training_ids("runs/smollm2-rta", train_ids=["nq-sample-00000"], validation_ids=[], method="rta",
    ...                    model="smollm2-135m-instruct", data_files=["runs/smollm2-rta/data/train.jsonl"])
    >>> find_trained_artifact("runs/smollm2-rta").ids
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icr2_components.records.integrity import atomic_write_bytes

TRAINING_IDS_FILE = "training_ids.json"
TRAINING_SUMMARY_FILE = "training_summary.json"
TRAINING_IDS_FORMAT = "icr2-training-ids/1"
# Sub-folders a component may be pointed above: RetrievalHeadRanker takes the training output folder or its head.
KNOWN_SUBFOLDERS = ("retrieval_head", "adapter")


class TrainingIdsError(ValueError):
    """A trained folder whose training ids are missing or malformed."""


def ids_sha256(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


@dataclass(frozen=True)
class TrainedArtifact:
    """A folder that records the ids it was trained (and validated) on."""

    folder: str
    train_ids: tuple[str, ...]
    validation_ids: tuple[str, ...]
    run_id: str
    file_sha256: str

    @property
    def ids(self) -> list[str]:
        """Every id the run learned from: training and validation (validation chose the checkpoint)."""
        return list(dict.fromkeys(self.train_ids + self.validation_ids))


def write_training_ids(folder: str | os.PathLike, train_ids: Sequence[str], validation_ids: Sequence[str], *,
                       method: str, model: str, data_files: Sequence[str | None] = (), run_id: str | None = None,
                       extra: dict[str, Any] | None = None) -> Path:
    """Write ``folder/training_ids.json``; returns its path. ``run_id`` defaults to a fresh uuid4."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, validation = [str(i) for i in train_ids], [str(i) for i in validation_ids]
    record = {
        "format": TRAINING_IDS_FORMAT, "run_id": run_id or uuid.uuid4().hex, "method": method, "model": model,
        "data_files": [str(f) for f in data_files if f], "train_ids": train, "train_ids_sha256": ids_sha256(train),
        "validation_ids": validation, "validation_ids_sha256": ids_sha256(validation), **(extra or {}),
    }
    path = folder / TRAINING_IDS_FILE
    # atomically: a run killed while writing leaves the previous file or this one, never half of one
    text = json.dumps(record, indent=1)
    atomic_write_bytes(path, lambda stream: stream.write(text.encode("utf-8")))
    return path


def read_training_ids(path: str | os.PathLike) -> TrainedArtifact:
    """Read one ``training_ids.json`` (checked)."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise TrainingIdsError(f"{path} is not JSON: {error}") from error
    if not isinstance(data, dict) or data.get("format") != TRAINING_IDS_FORMAT:
        raise TrainingIdsError(f"{path} is not a training-ids file (format {TRAINING_IDS_FORMAT!r}).")
    lists = {}
    for key in ("train_ids", "validation_ids"):
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(i, str) for i in value):
            raise TrainingIdsError(f"{path}: {key} must be a list of question id strings.")
        lists[key] = tuple(value)
        # the ids are whole: the hash written with them (files written before it was recorded carry none)
        recorded = data.get(f"{key}_sha256")
        if recorded is not None and recorded != ids_sha256(value):
            raise TrainingIdsError(
                f"{path}: {key} ({len(value)} ids) do not match the {key}_sha256 written with them: the file was "
                "edited or damaged; write it again (icr2 train writes it)."
            )
    return TrainedArtifact(str(path.parent), lists["train_ids"], lists["validation_ids"], str(data.get("run_id", "")),
                           hashlib.sha256(raw).hexdigest())


def find_trained_artifact(path: str | os.PathLike) -> TrainedArtifact | None:
    """The training record of the folder a component reads (or of its ``retrieval_head``/``adapter`` sub-folder,
    or of the training folder a ``checkpoint-*`` sits in); None when ``path`` is not a local folder made by training.
    Raises :class:`TrainingIdsError` for a trained
    folder (one with ``training_summary.json``) that records no ids."""
    folder = Path(path).expanduser()
    try:
        if not folder.is_dir():
            return None
    except (OSError, ValueError):  # a prompt template or other long text, not a path
        return None
    # the parent too: a Trainer checkpoint-* folder inside a training output folder
    for candidate in (folder, *(folder / sub for sub in KNOWN_SUBFOLDERS), folder.parent):
        if (candidate / TRAINING_IDS_FILE).is_file():
            return read_training_ids(candidate / TRAINING_IDS_FILE)
    for candidate in (folder, folder.parent):
        if (candidate / TRAINING_SUMMARY_FILE).is_file():
            raise TrainingIdsError(
                f"{path} was made by `icr2 train` ({candidate / TRAINING_SUMMARY_FILE}) but records no "
                f"{TRAINING_IDS_FILE}, so the questions it trained on cannot be kept out of an evaluation; train it "
                f"again (icr2 train writes {TRAINING_IDS_FILE}) or write one with "
                "icr2_components.artifacts.training_ids.write_training_ids.")
    return None
