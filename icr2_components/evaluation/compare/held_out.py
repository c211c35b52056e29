"""Which questions an ``icr2 compare`` run may report on, so that a held-out evaluation is held out.

A pipeline can carry what it learned from questions:

- a **tuned** pipeline (``icr2 compare --tune``, ``evaluation.compare.tuning``) records its dev questions in
  ``metadata.tuned.dev_question_ids``. Reporting it on any of them is refused: that is always a mistake in the
  command (tune on ``--split dev``, report on ``--split test``), and a smaller run would hide it.
- a **probed** component reads a head artifact (any component init parameter named ``artifact``: RAP's retrieval
  heads, PH3's heads) that records the questions it was probed on (``probed_ids``, ``artifacts.base``). Those
  questions are *excluded* from a run that chooses its questions (the dataset's order, ``--split``, ``--limit``):
  for every pipeline of the run, so that all pipelines are still scored on the same questions (paired tests need
  that), before ``--limit`` applies, counted in the report's ``run.held_out``. A question-id file is a promise
  to run exactly those questions, so one that lists probed questions is refused instead. An artifact that
  records no probed ids (made before they were kept) is refused: its held-out status cannot be known; re-probe it
  (``icr2 probe-heads`` records them) or add the ids.
- a **fine-tuned** component reads a folder made by ``icr2 train`` (a reader's ``model``, a ranker's ``head``, in
  any init parameter) that records the questions it trained and validated on (``training_ids.json``,
  ``artifacts.training_ids``). Those questions are treated exactly like probed ones: left out of a chosen run, a
  question-id file listing one is refused; a trained folder without the file is refused.

Seeds are gathered here too: every ``seed`` / ``*_seed`` init parameter of each pipeline's components.

Usage:
    >>> from icr2_components.evaluation.compare.held_out import select_questions
    >>> selection = select_questions(specs, dataset=None, limit=200, split="test", split_seed=0)
    >>> selection.ids, selection.describe()["held_out"]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icr2_components.evaluation.compare.splits import (
    DEFAULT_DEV_FRACTION,
    DEFAULT_SPLIT_SEED,
    SPLITS,
    DatasetSplit,
    file_sha256,
    ids_hash,
    read_question_ids,
    resolve_question_ids,
    split_question_ids,
)
from icr2_components.records import SkipReport

if TYPE_CHECKING:
    from icr2_components.kilt.question_sets import QuestionSet

ARTIFACT_PARAMETER = "artifact"


class HeldOutError(ValueError):
    """A run would report a pipeline on questions it was tuned or probed on; the message says how to avoid it."""


def _examples(ids: Sequence[str], count: int = 5) -> str:
    return ", ".join(list(ids)[:count]) + (", ..." if len(ids) > count else "")


def tuned_dev_ids(data: dict, source: str) -> list[str] | None:
    """The dev question ids a tuned pipeline records (None: not a tuned pipeline); refuses one without them."""
    tuned = (data.get("metadata") or {}).get("tuned")
    if tuned is None:
        return None
    ids = tuned.get("dev_question_ids") if isinstance(tuned, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise HeldOutError(f"{source} is a tuned pipeline (metadata.tuned) that records no dev_question_ids, so it "
                           "cannot be kept off its dev questions; tune it again (icr2 compare --tune records them).")
    return ids


def artifact_parameters(data: dict) -> list[tuple[str, str]]:
    """``(component, path)`` of every component init parameter named ``artifact``."""
    found = []
    for name, component in (data.get("components") or {}).items():
        value = ((component or {}).get("init_parameters") or {}).get(ARTIFACT_PARAMETER)
        if isinstance(value, (str, os.PathLike)):
            found.append((str(name), str(value)))
    return found


def pipeline_seeds(data: dict) -> dict[str, Any]:
    """``{"component.parameter": value}`` for every init parameter named ``seed`` or ending in ``_seed``."""
    seeds = {}
    for name, component in (data.get("components") or {}).items():
        for key, value in ((component or {}).get("init_parameters") or {}).items():
            if key == "seed" or str(key).endswith("_seed"):
                seeds[f"{name}.{key}"] = value
    return seeds


@dataclass
class ProbedArtifact:
    """An artifact a pipeline reads and the questions it learned from: ``kind`` "probed" (head and gate
    artifacts' ``probed_ids``) or "trained" (a fine-tuned folder's ``training_ids.json``)."""

    path: str
    ids: list[str]
    note: str
    pipelines: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    kind: str = "probed"

    def describe(self) -> dict:
        return {"pipelines": self.pipelines, "kind": self.kind, f"{self.kind}_ids": len(self.ids),
                f"{self.kind}_ids_sha256": ids_hash(self.ids), "excluded": len(self.excluded),
                "excluded_ids": self.excluded, **({f"{self.kind}_ids_note": self.note} if self.note else {})}


def trained_artifacts(data: dict) -> list[tuple[str, Any]]:
    """``(component.parameter, TrainedArtifact)`` for every init parameter naming a folder made by ``icr2 train``;
    raises :class:`HeldOutError` for one that records no training ids."""
    from icr2_components.artifacts.training_ids import TrainingIdsError, find_trained_artifact
    from icr2_components.pipeline_spec import string_parameters

    found = []
    for name, component in (data.get("components") or {}).items():
        for parameter, value in string_parameters((component or {}).get("init_parameters") or {}):
            if not value.strip() or "\n" in value:
                continue
            try:
                artifact = find_trained_artifact(value)
            except TrainingIdsError as error:
                raise HeldOutError(f"component {name!r} ({parameter}): {error}") from error
            if artifact is not None:
                found.append((f"{name}.{parameter}", artifact))
    return found


def probed_artifacts(specs: Sequence[Any]) -> dict[str, ProbedArtifact]:
    """Every head or gate artifact the pipelines read, with its probed ids, and every fine-tuned folder they read,
    with its training ids; each with the pipelines that read it."""
    from icr2_components.artifacts.base import read_probed_ids

    found: dict[str, ProbedArtifact] = {}
    for spec in specs:
        for component, path in artifact_parameters(spec.data):
            key = os.path.normpath(path)
            if key not in found:
                try:
                    ids, note = read_probed_ids(path)
                except FileNotFoundError as error:
                    raise FileNotFoundError(f"{spec.path}: component {component!r} reads {error}") from error
                if ids is None:
                    raise HeldOutError(
                        f"{path} (read by {spec.path}, component {component!r}) does not record the questions it was "
                        "probed on, so compare cannot keep them out of the evaluation; probe again (icr2 probe-heads "
                        "records probed_ids) or add `probed_ids` to the artifact.")
                found[key] = ProbedArtifact(path, ids, note)
            if spec.name not in found[key].pipelines:
                found[key].pipelines.append(spec.name)
        try:
            trained = trained_artifacts(spec.data)
        except HeldOutError as error:
            raise HeldOutError(f"{spec.path}: {error}") from error
        for _where, artifact in trained:
            key = os.path.normpath(artifact.folder)
            if key not in found:
                found[key] = ProbedArtifact(artifact.folder, artifact.ids, f"training_ids.json, run {artifact.run_id}",
                                            kind="trained")
            if spec.name not in found[key].pipelines:
                found[key].pipelines.append(spec.name)
    return found


def dataset_split(dataset: str | os.PathLike | QuestionSet | None, seed: int = DEFAULT_SPLIT_SEED,
                  dev_fraction: float = DEFAULT_DEV_FRACTION) -> tuple[DatasetSplit, str, SkipReport]:
    """The seeded dev/test split of a dataset's usable question ids (``evaluation.compare.splits``)."""
    from icr2_components.kilt.questions import dataset_question_ids

    ids, skips, path = dataset_question_ids(dataset)
    if len(ids) < 2:
        raise ValueError(f"{path} has {len(ids)} usable question(s); a dev/test split needs at least 2.")
    return split_question_ids(ids, seed=seed, dev_fraction=dev_fraction), path, skips


def dataset_sha256(source: Any) -> str:
    """SHA-256 of a dataset file, or of a question set's data and reading (``QuestionSet.sha256``)."""
    from icr2_components.kilt.question_sets import QuestionSet

    return source.sha256() if isinstance(source, QuestionSet) else file_sha256(source)


@dataclass
class QuestionSelection:
    """The question ids of one run (run order) and everything the report records about how they were chosen."""

    ids: list[str]
    dataset: Any  # the path of a KILT or ICR2 file, or a QuestionSet (kilt.question_sets)
    dataset_sha256: str
    skips: SkipReport
    mode: str  # "dataset order", "split" or "file"
    limit: int | None = None
    split: dict | None = None
    file: dict | None = None
    artifacts: dict[str, ProbedArtifact] = field(default_factory=dict)
    tuned: dict[str, dict] = field(default_factory=dict)

    def describe(self) -> dict:
        return {
            "mode": self.mode,
            "limit": self.limit,
            "split": self.split,
            "file": self.file,
            "held_out": {
                "artifacts": {path: artifact.describe() for path, artifact in self.artifacts.items()},
                "excluded_probed": len({i for a in self.artifacts.values() for i in a.excluded}),
                "tuned": self.tuned,
            },
        }


def select_questions(
    specs: Sequence[Any],
    dataset: str | os.PathLike | QuestionSet | None = None,
    limit: int | None = None,
    question_ids: str | os.PathLike | Sequence[str] | None = None,
    split: str | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
    dev_fraction: float = DEFAULT_DEV_FRACTION,
) -> QuestionSelection:
    """The questions a run of ``specs`` reports on (module docstring); raises :class:`HeldOutError` when a
    pipeline would be reported on questions it was tuned on, or a question-id file lists probed questions."""
    from icr2_components.kilt.questions import dataset_question_ids

    if split is not None and split not in SPLITS:
        raise ValueError(f"--split takes one of {list(SPLITS)}, got {split!r}.")
    if question_ids is not None and (split is not None or limit is not None):
        raise ValueError(
            "--question-ids runs exactly the file's questions; drop --split and --limit (or edit the file)."
        )
    tuned, tuned_selection = {}, {}
    for spec in specs:
        dev = tuned_dev_ids(spec.data, spec.path)
        if dev is not None:
            tuned[spec.name] = dev
            tuned_selection[spec.name] = spec.data["metadata"]["tuned"].get("dev_selection")  # its split seed
    artifacts = probed_artifacts(specs)
    probed = {i for artifact in artifacts.values() for i in artifact.ids}
    available, skips, path = dataset_question_ids(dataset)
    selection = QuestionSelection([], path, dataset_sha256(path), skips, "dataset order", limit=limit,
                                  artifacts=artifacts)
    if question_ids is not None:
        selection.mode = "file"
        if isinstance(question_ids, (str, os.PathLike)):
            requested = read_question_ids(question_ids)
            selection.file = {"path": str(question_ids), "sha256": file_sha256(question_ids)}
        else:
            requested = [str(i) for i in question_ids]
            selection.file = {"path": None}
        resolved = resolve_question_ids(requested, available)
        selection.file.update(resolved.describe())
        leaked = [i for i in resolved.found if i in probed]
        if leaked:
            owners = "; ".join(f"{a.path} ({', '.join(a.pipelines)}): {len(set(a.ids) & set(leaked))}"
                               for a in artifacts.values() if set(a.ids) & set(leaked))
            found_kinds = {a.kind for a in artifacts.values() if set(a.ids) & set(leaked)}
            kinds = " or ".join(sorted(found_kinds))
            noun = {"probed": "head artifact", "trained": "fine-tuned artifact"}.get(kinds, "artifact")
            raise HeldOutError(f"The question-id file lists {len(leaked)} question(s) a pipeline's {noun} was "
                               f"{kinds} on ({_examples(leaked)}; {owners}); remove them from the file, or choose "
                               f"questions with --split/--limit, which leaves {kinds} questions out.")
        ids = resolved.found
    else:
        pool = available
        if split is not None:
            made = split_question_ids(available, seed=split_seed, dev_fraction=dev_fraction)
            selection.mode = "split"
            selection.split = {"name": split, **made.describe()}
            pool = made.ids(split)
        for artifact in artifacts.values():
            mine = set(artifact.ids)
            artifact.excluded = [i for i in pool if i in mine]
        ids = [i for i in pool if i not in probed]
        if limit is not None:
            ids = ids[:limit]
    for name, dev in tuned.items():
        dev_set = set(dev)
        seen = [i for i in ids if i in dev_set]
        if seen:
            raise HeldOutError(
                f"{name} was tuned on {len(seen)} of this run's questions ({_examples(seen)}); report a tuned pipeline "
                "only on questions disjoint from its dev questions, e.g. --split test with the --split-seed and "
                "--dev-fraction it was tuned with.")
        selection.tuned[name] = {"dev_questions": len(dev), "dev_question_ids_sha256": ids_hash(dev), "overlap": 0,
                                 "dev_selection": tuned_selection.get(name)}
    if not ids:
        raise ValueError(f"No question of {path} is left to run ({skips.summary()}; "
                         f"{len(probed)} probed or trained ids excluded; mode {selection.mode}).")
    selection.ids = ids
    return selection


def question_file_comments(selection: QuestionSelection) -> list[str]:
    """The header of a run's ``question_ids.txt``: where the ids come from and how they were chosen."""
    lines = [
        f"icr2 compare question ids ({len(selection.ids)}), run order; sha256 of the list {ids_hash(selection.ids)}",
        f"dataset: {selection.dataset} (sha256 {selection.dataset_sha256})",
        f"chosen by: {selection.mode}" + (f", limit {selection.limit}" if selection.limit is not None else ""),
    ]
    if selection.split:
        lines.append(f"split: {selection.split['name']}, seed {selection.split['seed']}, "
                     + (f"dev fraction {selection.split['dev_fraction']}" if "dev_fraction" in selection.split
                        else f"dev count {selection.split['dev_count']}"))
    if selection.file:
        lines.append(
            f"from file: {selection.file.get('path')} ({selection.file.get('unknown', 0)} unknown ids left out)"
        )
    excluded = {i for a in selection.artifacts.values() for i in a.excluded}
    if excluded:
        lines.append(f"left out: {len(excluded)} question(s) probed or trained on by "
                     + ", ".join(Path(a.path).name for a in selection.artifacts.values() if a.excluded))
    lines.append("run them again with: icr2 compare --question-ids THIS_FILE ...")
    return lines
