"""Which checkpoint a training run resumes from, so that a run killed at any moment is simply run again.

``training.resume_from_checkpoint``:

- ``auto`` (the default): the newest complete ``checkpoint-*`` in ``output_dir`` when there is one, written by the
  same recipe; a fresh run otherwise. A run killed with SIGKILL loses only the steps since its last checkpoint;
  running the same command again goes on from there.
- ``true``: the newest complete checkpoint, an error when there is none; ``false``: start over; a path: that one.

The recipe a run trains with is kept in ``output_dir/training_recipe.json`` (with its content hash), written before
the first step. Checkpoints written by another recipe (other data, method, model or hyper-parameters) are never
resumed by ``auto``: that is an error naming what differs, since going on would mix two runs in one model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.records.integrity import DamagedFileError, read_sealed_json, write_sealed_json
from icr2_components.training.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

RECIPE_FILE = "training_recipe.json"
AUTO = "auto"
# what may change between a killed run and its resumption without changing what is trained
_NOT_COMPARED = {"output_dir", "source"}
_NOT_COMPARED_TRAINING = {"resume_from_checkpoint", "threads", "report_to", "logging_steps"}


class ResumeMismatchError(UserInputError):
    """``output_dir`` holds checkpoints of another recipe (or of unknown origin); the message says what differs."""


def compared_recipe(recipe: TrainingRecipe) -> dict[str, Any]:
    """The parts of ``recipe`` that a resumed run must share with the run it goes on from."""
    values = {key: value for key, value in recipe.as_dict().items() if key not in _NOT_COMPARED}
    values["training"] = {k: v for k, v in values["training"].items() if k not in _NOT_COMPARED_TRAINING}
    return values


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key}: checkpoints {a!r}, recipe {b!r}")
    return found


def record_recipe(recipe: TrainingRecipe) -> Path:
    """Write ``output_dir/training_recipe.json`` (sealed) for the run that starts now."""
    folder = Path(recipe.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECIPE_FILE
    write_sealed_json(path, {"recipe": compared_recipe(recipe)})
    return path


def checkpoint_to_resume(recipe: TrainingRecipe, is_complete: Callable[[Path], bool]) -> Path | None:
    """The checkpoint the run resumes from (None: a fresh run), by ``training.resume_from_checkpoint``.

    :param is_complete: whether a ``checkpoint-*`` folder was written whole (the file its trainer writes last).
    :raises FileNotFoundError: ``true`` or a path, and no such complete checkpoint.
    :raises ResumeMismatchError: ``auto`` and the checkpoints were written by another recipe, or by a run that did
        not record its recipe.
    """
    wanted = recipe.training.resume_from_checkpoint
    if wanted is False:
        return None
    if isinstance(wanted, str) and wanted != AUTO:
        path = Path(wanted)
        if not is_complete(path):
            raise FileNotFoundError(f"resume_from_checkpoint={wanted!r} is not a complete checkpoint of this trainer.")
        return path
    folder = Path(recipe.output_dir)
    # complete checkpoints only: a run killed while saving leaves a newest checkpoint-* that is not whole
    complete = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and is_complete(p)] \
        if folder.is_dir() else []
    if not complete:
        if wanted is True:
            raise FileNotFoundError(f"resume_from_checkpoint is true but {folder} holds no complete checkpoint-*; set "
                                    "save_steps so the first run writes some, or start without resuming.")
        return None
    newest = max(complete, key=lambda p: int(p.name.split("-")[-1]))
    if wanted is True:
        return newest
    recorded_path = folder / RECIPE_FILE
    how = (f"set training.resume_from_checkpoint: false to start over in {folder} (its checkpoints are replaced), "
           "true to resume anyway, or use another output_dir")
    if not recorded_path.exists():
        raise ResumeMismatchError(f"{folder} holds {newest.name} but no {RECIPE_FILE}, so whether it was trained with "
                                  f"this recipe is unknown; {how}.")
    try:
        recorded = read_sealed_json(recorded_path, "training recipe record")
    except DamagedFileError as error:
        raise ResumeMismatchError(f"{error} {how[0].upper()}{how[1:]}.") from None
    differences = _differences(recorded.get("recipe") or {}, compared_recipe(recipe))
    if differences:
        raise ResumeMismatchError(f"{folder} holds checkpoints of another recipe ({'; '.join(differences[:5])}); "
                                  f"{how}.")
    logger.warning("Resuming the run in %s from %s (training.resume_from_checkpoint: auto)", folder, newest)
    return newest
