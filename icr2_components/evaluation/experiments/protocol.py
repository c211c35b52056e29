"""A registered experiment: one paper's experiment as data, found by name (``icr2 reproduce NAME``).

An :class:`Experiment` says what is run and how it is judged before anything runs: the questions and how they are
drawn, the conditions (a curve's points: the gold document at a position among k documents, the asked pair at a
position among k pairs), the variants run under every condition (pipelines: the plain prompt and the query-aware
one), the references (closed-book, oracle), the metric, the seeds, the registered size and the paper's own
figures with the paper's model named. ``evaluation.experiments.runner`` runs it through ``icr2 compare``'s
machinery: every condition's questions are written as one ICR2 benchmark file (each question's corpus in
context, in the condition's order) and answered under compare's ``corpus`` context type, so the answer cache,
resume, concurrency against a served backend and the per-answer records are compare's.

Adding one: a module in this package with a subclass of :class:`Experiment` registered with
``@register_experiment``; ``experiment_names()`` imports the package's modules and lists them.

Usage example:
```python
from icr2_components.evaluation.experiments import experiment_names, get_experiment

print(experiment_names())                      # ('kv-retrieval', 'lost-in-the-middle', ...)
experiment = get_experiment("kv-retrieval")
print(experiment.describe()["conditions"][:3])
```
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.errors import UserInputError
from icr2_components.registry import Registry


class UnknownExperimentError(UserInputError):
    """An experiment name that is not registered."""


@dataclass(frozen=True)
class PaperFigure:
    """A figure the paper reports, as printed in its text or tables: ``value`` is an accuracy in 0..1."""

    model: str  # the paper's model, as the paper names it (GPT-3.5-Turbo (16K), MPT-30B-Instruct, ...)
    condition: str  # the condition (or reference) it stands beside
    value: float
    source: str  # where in the paper (Table 6, section 4.2)


@dataclass(frozen=True)
class Condition:
    """One point of a curve: ``group`` is the curve (``20 documents``), ``x`` its position on it."""

    name: str  # short, unique, used in ids and --conditions patterns: "20docs@5"
    group: str
    x: int
    label: str


@dataclass(frozen=True)
class Variant:
    """A pipeline run under every condition; ``name`` is its pipeline file's stem (compare's pipeline name)."""

    name: str
    label: str


@dataclass(frozen=True)
class Refusal:
    """A condition not run, and why (e.g. the prompt does not fit the model's context)."""

    condition: str
    reason: str


@dataclass
class PreparedData:
    """What an experiment wrote for a run: the ICR2 file of every kept condition, the question ids (base ids,
    in order), the file of references (or None) and how the questions were drawn (with the counts left out)."""

    conditions_file: Path
    question_ids: list[str]
    references_file: Path | None = None
    drawn: dict[str, Any] = field(default_factory=dict)


ID_SEPARATOR = "|"


def condition_question_id(question_id: str, condition: str) -> str:
    """The id of one question under one condition in the conditions file (``base|condition``)."""
    return f"{question_id}{ID_SEPARATOR}{condition}"


def split_question_id(text: str) -> tuple[str, str]:
    base, _, condition = text.rpartition(ID_SEPARATOR)
    if not base:
        raise ValueError(f"{text!r} is not a condition question id (base{ID_SEPARATOR}condition).")
    return base, condition


@dataclass
class RunSettings:
    """What ``icr2 reproduce`` was asked for, checked and resolved (``runner.run_experiment`` builds it): the
    conditions selected (``--conditions``, all by default), the backend (resolved; None: the pipelines' own
    reader in process), ``limit`` (None: the registered size), the answer budget, the output folder, the served
    concurrency and the statistics' seed."""

    conditions: list[Condition]
    conditions_asked: str | list[str] | None
    backend: Any
    limit: int | None
    max_new_tokens: int
    out: Path
    progress: bool = True
    concurrency: int | None = None
    seed: int = 0
    train: bool = False  # --train: an experiment with training arms trains them first (icr2-fine-tuning)
    options: dict[str, str] = field(default_factory=dict)  # --set KEY=VALUE, checked against Experiment.options
    #: with ``train``: a function (recipe file, dotted overrides) -> training summary that trains a recipe (the CLI
    #: passes the package's training entry point; evaluation/ never imports training/)
    trainer: Any = None
    #: --reuse-prompt-prefix: in-process readers start each reply from the last prompt's shared prefix (a speed
    #: setting: the same greedy replies in float32, the same cache)
    reuse_prompt_prefix: bool = False

    def compare_settings(self) -> dict[str, Any]:
        """The keyword arguments every ``run_compare`` of the run shares."""
        return {"max_new_tokens": self.max_new_tokens, "progress": self.progress, "backend": self.backend,
                "seed": self.seed, "concurrency": self.concurrency, "reuse_prompt_prefix": self.reuse_prompt_prefix}

    def at_registered_size(self, registered_size: int) -> bool:
        return (self.limit is None or self.limit >= registered_size) and self.conditions_asked is None


class Experiment:
    """The base of every registered experiment; subclasses fill the class attributes and the methods.

    An experiment owns how it runs (:meth:`run`), what its report's tables are (:meth:`tables`) and its plot
    (:meth:`plot`). ``curve.CurveExperiment`` is the shape of Lost in the Middle's experiments (accuracy along a
    curve of positions, per variant, with references); an experiment of another shape (techniques over context
    types, a gate's trade-off, fine-tuning arms) overrides the three and writes a report with the keys
    ``report.write_report`` reads: ``experiment`` (``describe()``), ``questions`` (``complete``, ``drawn``),
    ``statistics`` and ``run``.
    """

    name: ClassVar[str]
    paper: ClassVar[str]  # "Liu et al. 2024, Lost in the Middle (TACL), arXiv:2307.03172"
    title: ClassVar[str]
    claim: ClassVar[str]  # the paper's finding this reproduces, in one sentence
    questions: ClassVar[str]  # what the questions are and how they are drawn
    metric: ClassVar[str]  # the metric's name, as the report prints it
    registered_size: ClassVar[int]  # questions (examples) per condition at the registered size
    registered_max_new_tokens: ClassVar[int]
    seeds: ClassVar[dict[str, int]] = {"stats_seed": 0}
    paper_figures: ClassVar[tuple[PaperFigure, ...]] = ()
    paper_notes: ClassVar[tuple[str, ...]] = ()  # what the paper says in words where it prints no table
    figure_title: ClassVar[str] = ""  # the paper's figure the plot stands beside
    x_label: ClassVar[str] = "position"
    #: the experiment's own settings a user may give (``--set KEY=VALUE``): name -> what it is; anything else is
    #: refused. E.g. a labelled question file for a gate, adapters to evaluate.
    options: ClassVar[dict[str, str]] = {}
    #: whether ``--train`` means anything to it (training arms before evaluating them)
    trains: ClassVar[bool] = False
    #: the ``--conditions`` patterns the registered run is made of, when it goes in parts (Lost in the Middle: one
    #: document count at a time); a run of one of them at the registered size is a part of the registered run
    registered_parts: ClassVar[tuple[str, ...]] = ()

    def conditions(self) -> list[Condition]:
        raise NotImplementedError

    def variants(self) -> list[Variant]:
        raise NotImplementedError

    def reference_variants(self) -> list[Variant]:
        """Pipelines run once per question on the references file under compare's ``open`` (closed-book,
        oracle); none by default."""
        return []

    def run(self, settings: RunSettings) -> dict[str, Any]:
        """Run the experiment under ``settings`` and return its report (written by the runner afterwards)."""
        raise NotImplementedError

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        """``(title, note, header, rows)`` of every table of the report, in order (Markdown, HTML, console)."""
        raise NotImplementedError

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        """Draw the report's figure, the user's figures beside the paper's, to ``path`` (PNG)."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------------

    def select(self, patterns: str | list[str] | None) -> list[Condition]:
        """The conditions whose name matches any of ``patterns`` (shell-style, comma-separated: ``75keys@*``);
        all when None. A pattern matching nothing is an error listing the names."""
        every = self.conditions()
        if patterns is None:
            return every
        items = [p.strip() for p in (patterns.split(",") if isinstance(patterns, str) else patterns) if p.strip()]
        names = [c.name for c in every]
        unmatched = [p for p in items if not fnmatch.filter(names, p)]
        if not items or unmatched:
            raise UserInputError(f"--conditions {patterns!r}: {unmatched or 'nothing'} matches none of "
                                 f"{self.name}'s conditions: {', '.join(names)}.")
        return [c for c in every if any(fnmatch.fnmatchcase(c.name, p) for p in items)]

    def registered_command(self) -> str:
        return f"icr2 reproduce {self.name} --out runs/reproduce/{self.name}"

    def size_note(self, run: dict[str, Any]) -> str:
        """What a report says of its run's size (``run``: the report's ``run`` section): at the registered size, a
        part of the registered run (one of ``registered_parts``, every question), or NOT at the registered size,
        with the command that is."""
        whole = run.get("limit") is None or run["limit"] >= self.registered_size
        asked = run.get("conditions_asked")
        if run.get("at_registered_size"):
            return "at the registered size"
        if whole and isinstance(asked, str) and asked in self.registered_parts:
            return (f"a part of the registered run (--conditions '{asked}', the registered {self.registered_size} "
                    f"questions; the parts: {', '.join(repr(p) for p in self.registered_parts)})")
        return (f"NOT at the registered size ({self.registered_size} questions, every condition: "
                f"`{self.registered_command()}`)")

    def describe(self) -> dict[str, Any]:
        """The protocol as data (what ``icr2 reproduce --list`` prints and every report records)."""
        return {
            "name": self.name,
            "paper": self.paper,
            "title": self.title,
            "claim": self.claim,
            "questions": self.questions,
            "metric": self.metric,
            "registered_size": self.registered_size,
            "registered_max_new_tokens": self.registered_max_new_tokens,
            "registered_command": self.registered_command(),
            "seeds": dict(self.seeds),
            "conditions": [c.name for c in self.conditions()],
            "variants": [asdict(v) for v in self.variants()],
            "references": [asdict(v) for v in self.reference_variants()],
            "paper_figures": [asdict(f) for f in self.paper_figures],
            "figure": self.figure_title,
            "x_label": self.x_label,
            "paper_notes": list(self.paper_notes),
            "options": dict(self.options),
            "trains": self.trains,
            "registered_parts": list(self.registered_parts),
        }


EXPERIMENTS: Registry[type[Experiment]] = Registry(
    "experiment", UnknownExperimentError,
    how_to_add="`icr2 reproduce --list` lists them; a new one is a registered Experiment subclass in "
               "icr2_components/evaluation/experiments/.")


def register_experiment(cls: type[Experiment]) -> type[Experiment]:
    """Class decorator: register an :class:`Experiment` subclass under its ``name``."""
    for attribute in ("name", "paper", "title", "claim", "questions", "metric", "registered_size",
                      "registered_max_new_tokens"):
        if not hasattr(cls, attribute):
            raise TypeError(f"{cls.__qualname__} must set `{attribute}` to be a registered experiment.")
    EXPERIMENTS.register(cls.name, cls)
    return cls


_NOT_EXPERIMENTS = {"protocol", "curve", "runner", "report"}


def _load_all() -> None:
    import icr2_components.evaluation.experiments as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _NOT_EXPERIMENTS and not info.name.startswith("_"):
            importlib.import_module(f"icr2_components.evaluation.experiments.{info.name}")


def experiment_names() -> tuple[str, ...]:
    _load_all()
    return EXPERIMENTS.names()


def get_experiment(name: str) -> Experiment:
    _load_all()
    return EXPERIMENTS.get(name)()


Scorer = Callable[[str, list[str]], bool]
