"""The report of ``icr2 eval-gate --labels``: every gate method on labelled questions, overall and per source,
with the claim test, the per-question rows, and its files (JSON, PNG, the curves as Markdown).

Kept out of the command so the command only parses, calls and prints.

Usage:
    >>> from icr2_components.evaluation.reports.gate_report import build_gate_report, write_gate_report
    >>> report = build_gate_report(runs, labelled, described, cost=0.1, seed=0, settings={}, claim=None)
    >>> write_gate_report(report, "runs/gates", title="gates on 200 labelled questions", cost=0.1)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icr2_components.evaluation.gates.gate_tradeoff import REFERENCES, compare_methods, intersection_union_claim


def check_claim_methods(specs: Sequence[Any], claim: str | None) -> None:
    """``--methods`` must hold always (the baseline), and with ``--claim`` the claimed method and both references."""
    if "always" not in [s.name for s in specs]:
        raise ValueError("--methods must include always (the baseline every method is tested against).")
    if claim is None:
        return
    if claim not in [s.name for s in specs]:
        raise ValueError(f"--claim {claim!r} is not one of --methods ({[s.name for s in specs]}).")
    missing = set(REFERENCES) - {s.method for s in specs if s.artifact is None}
    if missing:
        raise ValueError(f"--claim tests a gate against TA-ARE and the vanilla prompt: add {sorted(missing)} to "
                         "--methods.")


def build_gate_report(runs: dict[str, dict[str, Any]], labelled: Sequence[Any], described: dict[str, Any], *,
                      cost: float, seed: int, settings: dict[str, Any], claim: str | None = None) -> dict[str, Any]:
    """Every method compared overall (``all``) and per data source (``by_source``), the claim, per-question rows."""
    report = {"labels": described, "settings": settings,
              "methods": {n: {k: v for k, v in r.items() if k not in ("decisions", "scores")} for n, r in runs.items()}}
    report["all"] = compare_methods(runs, labelled, cost, seed=seed)
    if claim is not None:
        report["claim"] = intersection_union_claim(report["all"]["versus_references"], claim)
    report["by_source"] = {}
    for source in sorted({q.source for q in labelled}):
        members = [i for i, q in enumerate(labelled) if q.source == source]
        subset = {n: {**r, "decisions": [r["decisions"][i] for i in members],
                      "scores": None if r["scores"] is None else [r["scores"][i] for i in members]}
                  for n, r in runs.items()}
        report["by_source"][source] = compare_methods(subset, [labelled[i] for i in members], cost, seed=seed)
    report["rows"] = [{"id": q.id, "source": q.source, "outcome": q.outcome, "needs_retrieval": q.needs_retrieval,
                       **{f"{n} retrieve": r["decisions"][i] for n, r in runs.items()},
                       **{f"{n} score": r["scores"][i] for n, r in runs.items() if r["scores"] is not None}}
                      for i, q in enumerate(labelled)]
    return report


def format_claim(claim: dict[str, Any]) -> str:
    """One line: whether the claimed method beats both references, with each part's difference and p."""
    parts = "; ".join(f"{p['metric']} vs {p['reference']}: " + (f"{p['difference']:+.3f} p {p['p_value']:.3g}"
                      if "p_value" in p else p["why"]) + (" holds" if p["holds"] else " fails")
                      for p in claim["parts"])
    return (f"claim ({claim['test']}): {claim['method']} beats {' and '.join(claim['references'])}: "
            f"{'HOLDS' if claim['holds'] else 'does not hold'} ({parts})")


def report_curves(report: dict[str, Any]) -> dict[str, list[dict[str, float]]]:
    """The trade-off curve of every scored method (overall)."""
    return {n: e["curve"] for n, e in report["all"]["methods"].items() if e.get("curve")}


def curves_markdown(curves: dict[str, list[dict[str, float]]], title: str, cost: float) -> str:
    lines = [f"# Trade-off curves ({title}; λ = {cost:g})", ""]
    for name, curve in curves.items():
        lines += [f"## {name}", "", "| cut | retrieval rate | answer match | objective |", "|---|---|---|---|"]
        lines += [f"| {p['cut']:.4f} | {p['retrieval_rate']:.3f} | {p['answer_match']:.3f} | {p['objective']:.3f} |"
                  for p in curve] + [""]
    return "\n".join(lines)


def write_gate_report(report: dict[str, Any], out_dir: str | os.PathLike, *, title: str, cost: float) -> list[Path]:
    """``tradeoff.json``, ``tradeoff.png`` and ``curves.md`` in ``out_dir``; returns their paths."""
    from icr2_components.plotting import plot_gate_tradeoff

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tradeoff.json", out / "tradeoff.png", out / "curves.md"]
    paths[0].write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    plot_gate_tradeoff(report["all"], paths[1], title=title)
    paths[2].write_text(curves_markdown(report_curves(report), title, cost))
    return paths


__all__ = ["build_gate_report", "check_claim_methods", "curves_markdown", "format_claim", "report_curves",
           "write_gate_report"]
