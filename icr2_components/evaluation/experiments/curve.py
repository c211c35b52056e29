"""The shape of Lost in the Middle's experiments: accuracy along a curve of positions, per variant, with references.

Apart from ``protocol`` so that the protocol stays data: a curve experiment runs through ``runner.run_curves`` and
tabulates through ``report.curve_tables``, and both of those read the protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icr2_components.evaluation.experiments.protocol import (
    Condition,
    Experiment,
    PreparedData,
    Refusal,
    RunSettings,
)
from icr2_components.evaluation.experiments.report import curve_tables
from icr2_components.evaluation.experiments.runner import run_curves


class CurveExperiment(Experiment):
    """An experiment of Lost in the Middle's shape: every question under every condition (a point of a curve) for
    every variant (pipeline), answered under compare's ``corpus`` context from one ICR2 file the experiment writes,
    and references (closed-book, oracle) under ``open``; accuracy per point with Wilson intervals, position tests
    per curve, variants against the first (``runner.run_curves``, ``report.build_report``)."""

    def write_pipelines(self, folder: Path) -> list[Path]:
        """Write the variants' and references' pipeline YAMLs into ``folder``; returns them, variants first."""
        raise NotImplementedError

    def prepare(self, conditions: list[Condition], limit: int | None, folder: Path,
                progress: bool = True) -> PreparedData:
        """Draw the questions (the first ``limit``, else ``registered_size``) and write the conditions file (and
        the references file) into ``folder``."""
        raise NotImplementedError

    def refusals(self, conditions: list[Condition], reader: Any, max_new_tokens: int) -> list[Refusal]:
        """Conditions the reader cannot run, with the reason; none by default."""
        return []

    def score(self, reply: str, answers: list[str]) -> bool:
        raise NotImplementedError

    def run(self, settings: RunSettings) -> dict[str, Any]:
        return run_curves(self, settings)

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        return curve_tables(report)

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        from icr2_components.plotting import plot_reproduction  # matplotlib only when a plot is drawn

        return plot_reproduction(report, path)


__all__ = ["CurveExperiment"]
