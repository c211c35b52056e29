"""The report of a registered experiment: the user's figures beside the paper's, with intervals, tests and plots.

Numbers: per condition and variant, accuracy (the experiment's metric) with its 95% Wilson interval, on the
questions answered under every condition and variant (so every comparison is paired); per curve and variant,
Cochran's Q across the positions and exact McNemar between the first and last position
(``statistics.position_tests``); per condition, each further variant (query-aware) against the first (exact
McNemar, Holm across the conditions); the references (closed-book, oracle) on the same questions, each condition
tested against each of them (exact McNemar, Holm across the conditions, per variant and reference). The paper's
figures are printed beside them with the paper's model named; they come from another model and other questions,
so they are shown, never tested against.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from icr2_components.evaluation.experiments.protocol import Condition, Experiment, PreparedData


def _cell(outcomes: list[bool]) -> dict[str, Any]:
    from icr2_components.evaluation.statistics.proportions import wilson_interval

    n, right = len(outcomes), sum(outcomes)
    if n == 0:
        return {"n": 0, "correct": 0, "accuracy": None, "ci95": None}
    low, high = wilson_interval(right, n)
    return {"n": n, "correct": right, "accuracy": right / n, "ci95": [low, high]}


def build_report(experiment: Experiment, conditions: list[Condition], scores: dict[str, dict[str, dict[str, bool]]],
                 references: dict[str, dict[str, bool]], prepared: PreparedData, seed: int = 0) -> dict[str, Any]:
    """The report's numbers (see the module doc). ``scores[variant][condition][question id]`` and
    ``references[pipeline][question id]`` are the scored answers."""
    from icr2_components.evaluation.statistics.position_tests import paired_position_test, shape_verdict

    variants = [v for v in experiment.variants() if v.name in scores]
    complete = [q for q in prepared.question_ids
                if all(q in scores[v.name].get(c.name, {}) for v in variants for c in conditions)]
    cells = []
    for condition in conditions:
        for variant in variants:
            outcomes = [scores[variant.name][condition.name][q] for q in complete]
            cells.append({"condition": condition.name, "group": condition.group, "x": condition.x,
                          "label": condition.label, "variant": variant.name, **_cell(outcomes)})
    curves = []
    groups = list(dict.fromkeys(c.group for c in conditions))
    for group in groups:
        points = [c for c in conditions if c.group == group]
        for variant in variants:
            entry: dict[str, Any] = {"group": group, "variant": variant.name,
                                     "positions": [c.x for c in points]}
            if len(points) >= 2 and complete:
                matrix = [[int(scores[variant.name][c.name][q]) for c in points] for q in complete]
                test = paired_position_test(matrix, [str(c.x) for c in points], seed=seed)
                test.pop("rates", None)  # the cells carry the rates with their Wilson intervals
                entry.update(test=test, verdict=shape_verdict(test))
            else:
                entry["verdict"] = "one position or no complete question: no test"
            curves.append(entry)
    versus = []
    if len(variants) >= 2 and complete:
        first = variants[0]
        for other in variants[1:]:
            rows = _paired_rows(conditions, complete, lambda c, q, o=other: scores[o.name][c.name][q],
                                lambda c, q: scores[first.name][c.name][q], ("only_variant", "only_baseline"))
            versus.append({"variant": other.name, "baseline": first.name, "test": "exact McNemar",
                           "holm_family": f"the {len(rows)} conditions", "rows": rows})
    reference_cells = {}
    for name, answers in references.items():
        outcomes = [answers[q] for q in complete if q in answers]
        reference_cells[name] = {**_cell(outcomes), "questions_missing": len(complete) - len(outcomes)}
    against_references = _against_references(variants, conditions, scores, references, complete)
    return {
        "experiment": experiment.describe(),
        "questions": {"drawn": len(prepared.question_ids), "complete": len(complete),
                      "incomplete": len(prepared.question_ids) - len(complete), "ids": complete},
        "conditions": [{"name": c.name, "group": c.group, "x": c.x, "label": c.label} for c in conditions],
        "cells": cells,
        "curves": curves,
        "variants_vs_first": versus,
        "references": reference_cells,
        "conditions_vs_references": against_references,
        "paper": [asdict(f) for f in experiment.paper_figures],
        "statistics": {"interval": "Wilson 95% per cell (0/1 scores)",
                       "curves": "Cochran's Q across positions; exact McNemar first vs last (same questions)",
                       "variants": "exact McNemar per condition, Holm across conditions",
                       "references": "each condition against each reference, per variant: exact McNemar on the "
                                     "questions the reference answered too, Holm across the conditions",
                       "seed": seed,
                       "paper": "the paper's figures are another model on other questions: shown beside, not tested"},
    }


def _paired_rows(conditions, questions, first, second, names: tuple[str, str]) -> list[dict[str, Any]]:
    """Per condition, ``first(condition, question)`` against ``second(condition, question)`` on ``questions``: the
    difference, the questions right only with each (under ``names``), exact McNemar p and Holm across the
    conditions."""
    from icr2_components.evaluation.statistics.paired_comparison import holm
    from icr2_components.evaluation.statistics.proportions import paired_outcomes

    rows = []
    for condition in conditions:
        a = [first(condition, q) for q in questions]
        b = [second(condition, q) for q in questions]
        result = paired_outcomes(a, b)
        rows.append({"condition": condition.name, "difference": (sum(a) - sum(b)) / len(questions),
                     names[0]: result["only_a"], names[1]: result["only_b"], "p_value": float(result["p_value"])})
    for row, adjusted in zip(rows, holm([r["p_value"] for r in rows]), strict=True):
        row["p_holm"] = adjusted
    return rows


def _against_references(variants, conditions, scores, references, complete) -> list[dict[str, Any]]:
    """Each condition against each reference (closed-book, oracle), per variant: the paper's own reading of figure
    5 (is the middle below closed-book?), paired on the questions the reference answered too."""
    families = []
    for name, answers in references.items():
        shared = [q for q in complete if q in answers]
        if not shared:
            continue
        for variant in variants:
            rows = _paired_rows(conditions, shared, lambda c, q, v=variant: scores[v.name][c.name][q],
                                lambda c, q, a=answers: a[q], ("only_condition", "only_reference"))
            families.append({"reference": name, "variant": variant.name, "n": len(shared), "test": "exact McNemar",
                             "holm_family": f"the {len(rows)} conditions", "rows": rows})
    return families


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _interval(cell: dict) -> str:
    if cell.get("accuracy") is None:
        return "n = 0"
    return f"{cell['accuracy']:.3f} [{cell['ci95'][0]:.2f}-{cell['ci95'][1]:.2f}]"


def _paired_table(rows: list[dict], only_a: str, only_b: str) -> list[list[str]]:
    return [[r["condition"], f"{r['difference']:+.3f}", str(r[only_a]), str(r[only_b]), f"{r['p_value']:.3g}",
             f"{r['p_holm']:.3g}"] for r in rows]


def curve_tables(report: dict) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """A curve experiment's tables: ``(title, note, header, rows)`` of every table of the report, in order
    (Markdown, HTML and the console)."""
    experiment = report["experiment"]
    variants = [v["name"] for v in experiment["variants"] if any(c["variant"] == v["name"] for c in report["cells"])]
    paper_models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    by_condition = {(c["condition"], c["variant"]): c for c in report["cells"]}
    paper = {(f["condition"], f["model"]): f["value"] for f in report["paper"]}
    n = report["questions"]["complete"]
    header = ["condition", *[f"{v} (yours) [95% CI]" for v in variants], *[f"{m} (paper)" for m in paper_models]]
    rows = []
    for condition in report["conditions"]:
        rows.append([condition["label"],
                     *[_interval(by_condition[(condition["name"], v)]) for v in variants],
                     *[_pct(paper.get((condition["name"], m))) for m in paper_models]])
    for name, cell in report["references"].items():
        rows.append([name, _interval(cell), *["" for _ in variants[1:]],
                     *[_pct(paper.get((name, m))) for m in paper_models]])
    out = [(f"{experiment['metric']} beside the paper",
            f"Yours: n = {n} questions answered under every condition and variant (Wilson 95% intervals). Paper: "
            f"{experiment['paper']}, as printed there (another model, other questions: not tested against). "
            "An empty paper cell: the paper prints no number for it.", header, rows)]
    curve_rows = [[c["group"], c["variant"], c["verdict"],
                   *(["", "", ""] if "test" not in c else
                     [f"{c['test']['first_vs_last']['difference']:+.3f}",
                      f"{c['test']['first_vs_last']['p_value']:.3g}",
                      f"Q = {c['test']['across_positions']['statistic']:.1f}, "
                      f"p = {c['test']['across_positions']['p_value']:.3g}"])]
                  for c in report["curves"]]
    out.append(("does position matter? (paired, same questions at every position)",
                "last minus first position, its exact McNemar p, and Cochran's Q across all positions.",
                ["curve", "variant", "verdict", "last - first", "McNemar p", "Cochran's Q"], curve_rows))
    for versus in report["variants_vs_first"]:
        out.append((f"{versus['variant']} against {versus['baseline']} (paired)",
                    f"difference in accuracy, questions right only with each, exact McNemar p (Holm across "
                    f"{versus['holm_family']}).",
                    ["condition", "difference", f"only {versus['variant']}", f"only {versus['baseline']}", "p",
                     "p (Holm)"],
                    _paired_table(versus["rows"], "only_variant", "only_baseline")))
    for family in report.get("conditions_vs_references", []):
        out.append((f"{family['variant']} against {family['reference']} (paired)",
                    f"each condition minus {family['reference']} on the {family['n']} questions both answered, "
                    f"questions right only with each, exact McNemar p (Holm across {family['holm_family']}).",
                    ["condition", "difference", "only the condition", f"only {family['reference']}", "p",
                     "p (Holm)"],
                    _paired_table(family["rows"], "only_condition", "only_reference")))
    if report.get("refused"):
        out.append(("conditions refused", "not run, with the reason.", ["condition", "reason"],
                    [[r["condition"], r["reason"]] for r in report["refused"]]))
    return out


def write_report(report: dict, out_dir: str | Path, experiment_object: Experiment) -> dict[str, str]:
    """Write ``report.json``, ``report.md``, ``report.html``, the plot (``experiment_object.plot``) and the
    interactive page (``explore.html``: ``reports.interactive_page``, from the run's answer caches) into
    ``out_dir``, with ``experiment_object.tables``; returns the paths (also recorded in ``report["files"]``)."""
    from icr2_components.evaluation.reports.interactive_page import PAGE_FILE, write_reproduce_page
    from icr2_components.evaluation.reports.rendering import html_table, markdown_table

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    experiment = report["experiment"]
    files = {"json": out / "report.json", "markdown": out / "report.md", "html": out / "report.html",
             "explore": out / PAGE_FILE, "plot": out / f"{experiment['name']}.png"}
    experiment_object.plot(report, files["plot"])
    report["files"] = {k: str(v) for k, v in files.items()}
    files["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False))
    run = report.get("run", {})
    size_note = experiment_object.size_note(run)
    intro = [f"{experiment['paper']}. {experiment['claim']}",
             f"Questions: {experiment['questions']} This run: {report['questions']['complete']} complete of "
             f"{report['questions']['drawn']} drawn, {size_note}; backend {run.get('backend')}, "
             f"max_new_tokens {run.get('max_new_tokens')}. Metric: {experiment['metric']}.",
             f"Raw runs (compare's reports, answer caches): {json.dumps(run.get('compare_reports'))}.",
             *(f"Paper: {note}" for note in experiment.get("paper_notes") or [])]
    title = f"icr2 reproduce {experiment['name']}: {experiment['title']}"
    md = [f"# {title}", "", *intro, "", f"![{experiment['figure']}]({files['plot'].name})", ""]
    page = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:3px 8px}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
            *(f"<p>{html.escape(line)}</p>" for line in intro),
            f"<p><img src='{files['plot'].name}' alt='{html.escape(experiment['figure'])}'></p>"]
    for table_title, note, header, rows in experiment_object.tables(report):
        md += [f"## {table_title}", "", note, "", markdown_table(header, rows), ""]
        page += [f"<h2>{html.escape(table_title)}</h2>", f"<p>{html.escape(note)}</p>", html_table(header, rows)]
    md += ["## Statistics", "", *(f"- {k}: {v}" for k, v in report["statistics"].items()), ""]
    page += ["<h2>Statistics</h2><ul>", *(f"<li>{html.escape(f'{k}: {v}')}</li>"
                                         for k, v in report["statistics"].items()), "</ul></body></html>"]
    files["markdown"].write_text("\n".join(md))
    files["html"].write_text("\n".join(page))
    write_reproduce_page(report, out, experiment_object)
    return {k: str(v) for k, v in files.items()}
