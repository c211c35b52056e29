"""``icr2 reproduce icr2-fine-tuning --train``: the arms' weights trained with their recipes before they are evaluated.

Each trainable weight (``icr2_fine_tuning_arms.RECIPES``: the three LoRA readers, the gold-only ablation, the retrieval
head) is trained with its recipe (``resources/training/icr2_table3/NAME.yaml``, or ``--set recipes=DIR``) by the
trainer the run is given (``RunSettings.trainer``: a function (recipe file, overrides) -> training summary; the CLI
passes the package's training entry point, what ``icr2 train`` runs: evaluation/ never imports training/, the
floors keep them apart) into ``out/train/NAME``
on the registered training questions' corpora in context (``out/train/data``, built as the evaluation's: positions
< 2000 only), validated on the dev questions; the RAP arms' heads are then probed on the fine-tuned reader over
training questions as ``icr2 probe-heads`` does (``probe_to_artifact``: 4 generated-token queries, mean, M = 1).
A weight already trained there is kept (run the command again to resume after a kill). ``--limit N`` trains on the
first N training and dev questions with the steps scaled to one epoch of them: on CPU, only that is quick; the
registered recipes took 8 to 80 minutes an arm on 2 cores, and a large model needs GPU recipes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import (
    DEV_QUESTIONS,
    PROBE_QUESTIONS,
    RECIPES,
    TRAIN_QUESTIONS,
    Arm,
    build_corpora,
    find_weights,
    recipe_file,
    registered_ids,
    scaled_steps,
)

logger = logging.getLogger(__name__)
DATA_FILES = ("train.jsonl", "train_gold_only.jsonl")


def weights_to_train(arms: list[Arm]) -> tuple[list[str], list[str]]:
    """The recipes the arms need trained (in ``RECIPES`` order) and the readers whose heads RAP arms need probed."""
    needed = {w for arm in arms for w in arm.weights() if not w.endswith(".json")}
    probed = [arm.adapter for arm in arms if arm.selector == "rap" and arm.adapter]
    return [name for name in RECIPES if name in needed], list(dict.fromkeys(probed))


def build_training_data(folder: Path, limit: int | None, progress: bool = True) -> dict[str, Any]:
    """``train.jsonl`` (the first ``limit`` training questions, else 1,000), ``train_gold_only.jsonl`` (the same,
    gold passages only: ICR2's ablation) and ``dev.jsonl`` (the first ``limit`` dev questions, else 100), built as
    the evaluation's corpora; kept while the questions are the same."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": registered_ids("train")[:limit or TRAIN_QUESTIONS],
              "dev": registered_ids("dev")[:limit or DEV_QUESTIONS]}
    written = {}
    for split, ids in splits.items():
        path, stamp = folder / f"{split}.jsonl", folder / f"{split}.ids.json"
        if not (path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == ids):
            build_corpora(Path(str(path) + ".part"), ids, progress)
            Path(str(path) + ".part").replace(path)
            stamp.write_text(json.dumps(ids))
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        written[split] = len(records)
        if split == "train":
            gold = [dict(r, context=[c for c in r["context"] if c["passage_id"] in set(r["gold_passage_ids"])])
                    for r in records]
            (folder / "train_gold_only.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gold))
    return {"questions": {k: len(v) for k, v in splits.items()}, "written": written}


def train_recipe(name: str, folder: Path, data: Path, limit: int | None, recipes: str | None,
                 trainer: Callable[[str, dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Train one weight with its recipe into ``folder/NAME`` by ``trainer`` (its data and output folder the run's;
    steps scaled with ``limit``); returns what was trained, or that it was there already."""
    import yaml

    if find_weights(folder, name) is not None:
        return {"recipe": name, "trained": "already (kept)", "weights": str(find_weights(folder, name))}
    path = recipe_file(name, recipes)
    if not path.is_file():
        raise UserInputError(f"--train: no recipe {path} for {name}.")
    values = yaml.safe_load(path.read_text()) or {}
    train_file = Path(str((values.get("data") or {}).get("train", "train.jsonl"))).name
    if train_file not in DATA_FILES:
        raise UserInputError(f"--train: {path}'s data.train is {train_file}; the run builds "
                             f"{' and '.join(DATA_FILES)}.")
    overrides: dict[str, Any] = {"data.train": str(data / train_file), "data.validation": str(data / "dev.jsonl"),
                                 "output_dir": str(folder / name)}
    training = values.get("training") or {}
    if limit is not None:  # one epoch of the questions given, checkpoints and validation at its end
        steps = scaled_steps(int(training.get("max_steps") or 1), limit)
        overrides["training.max_steps"] = steps
        overrides.update({f"training.{key}": steps for key in ("eval_steps", "save_steps") if key in training})
    summary = trainer(str(path), overrides) or {}
    return {"recipe": str(path), "trained": "now", "overrides": overrides, "seconds": summary.get("seconds"),
            "weights": str(find_weights(folder, name))}


def probe_heads(reader: str, folder: Path, data: Path, limit: int | None, progress: bool = True) -> dict[str, Any]:
    """RAP heads of the fine-tuned ``reader`` (``folder/rap_heads_READER.json``), probed on training questions."""
    from icr2_components.filters.probing.cic_instances import read_benchmark_instances
    from icr2_components.filters.probing.probing_job import choose_instances, probe_to_artifact

    artifact = folder / f"rap_heads_{reader}.json"
    if artifact.is_file():
        return {"heads": str(artifact), "probed": "already (kept)"}
    model = find_weights(folder, reader)
    instances = choose_instances(list(read_benchmark_instances(data / "train.jsonl")),
                                 min(limit or PROBE_QUESTIONS, PROBE_QUESTIONS), 0)
    probe_to_artifact(instances, str(model), m=1, q=4, query_position_mode="generated_tokens", aggregate="mean",
                      dtype="bfloat16", artifact_path=str(artifact), heatmap_path=str(artifact.with_suffix(".png")),
                      progress=progress)
    return {"heads": str(artifact), "probed": "now", "questions": len(instances)}


def train_arms(arms: list[Arm], folder: Path, limit: int | None, recipes: str | None,
               trainer: Callable[[str, dict[str, Any]], dict[str, Any]], progress: bool = True) -> dict[str, Any]:
    """Train what ``arms`` need into ``folder`` (module doc); returns what was trained and probed."""
    names, probed = weights_to_train(arms)
    if not names:
        return {"trained": {}, "probed": {}, "note": "no arm asked for needs weights"}
    data = folder / "data"
    built = build_training_data(data, limit, progress)
    trained = {name: train_recipe(name, folder, data, limit, recipes, trainer) for name in names}
    heads = {reader: probe_heads(reader, folder, data, limit, progress) for reader in probed}
    return {"data": built, "trained": trained, "probed": heads}


__all__ = ["build_training_data", "probe_heads", "train_arms", "train_recipe", "weights_to_train"]
