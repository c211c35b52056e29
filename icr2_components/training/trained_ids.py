"""Recording what a training run learned from (``artifacts.training_ids``): one call at the start of a run writes
``output_dir/training_ids.json`` (so checkpoints written on the way are covered too, and a killed run still
records it), one at the end copies it into the folder the run saved (a LoRA adapter, the retrieval head)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from icr2_components.artifacts.training_ids import TRAINING_IDS_FILE, write_training_ids
from icr2_components.training.recipe import TrainingRecipe


def is_main_process() -> bool:
    """Rank 0 of an ``accelerate launch``/``torchrun`` run, or a plain single process."""
    return int(os.environ.get("RANK", "0")) == 0


def record_training_ids(recipe: TrainingRecipe, train: Sequence, validation: Sequence) -> Path:
    """Write ``output_dir/training_ids.json`` with the ids of the ``train`` and ``validation`` examples (anything
    with an ``id``); returns the file."""
    data = recipe.data
    path = Path(recipe.output_dir) / TRAINING_IDS_FILE
    if not is_main_process():  # under accelerate launch every process runs this; one writes
        return path
    files = [data.train or str(Path(recipe.output_dir) / "data" / "train.jsonl"), data.validation]
    return write_training_ids(recipe.output_dir, [e.id for e in train], [e.id for e in validation],
                              method=recipe.method, model=recipe.model, data_files=files,
                              extra={"finetuning": recipe.finetuning, "limit": data.limit,
                                     "validation_fraction": data.validation_fraction})


def copy_training_ids(recipe: TrainingRecipe, saved: str | Path) -> None:
    """Put the run's ``training_ids.json`` into the saved artifact's own folder when that is not ``output_dir``."""
    source = Path(recipe.output_dir) / TRAINING_IDS_FILE
    if not is_main_process():
        return
    target = Path(saved)
    if target.is_dir() and target.resolve() != Path(recipe.output_dir).resolve():
        shutil.copyfile(source, target / TRAINING_IDS_FILE)
