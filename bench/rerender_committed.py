"""Re-render every committed report that has an answer cache beside it, from that cache, asking no model, and compare
its figures with the committed report.

    .venv/bin/python bench/rerender_committed.py --check      # compare only; exit 1 on any difference
    .venv/bin/python bench/rerender_committed.py --write NAME  # rewrite one committed compare report from its cache

Each report is re-rendered into a temporary folder by the code that made it:

- ``icr2 compare`` runs (a ``report.json`` with ``answers.jsonl[.gz]`` beside it): from the records as written,
  under the pipeline hashes the report names (``evaluation.compare.recorded.rerender_as_recorded``), so a pipeline
  YAML edited since does not hide its answers;
- ``reproduce/cub``: ``bench/reproduce_reports_from_cache.py``'s recomputation;
- ``position_sweep``: ``bench/position_sweep.py --report-only`` over a copy of the cache.

Figures are compared section by section with ``figure_differences`` (what describes the run, not its results, is
left out: ``RUN_TIME_KEYS`` and, for the sweep, its seconds and machine). A report with a cache that no re-render
covers is listed as such, never counted identical. The table: report, answers read, model answers asked (always
0), identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from icr2_components._environment import DEFAULTS

os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
CACHE_NAMES = ("answers.jsonl", "answers.jsonl.gz", "compare_answers.jsonl", "compare_answers.jsonl.gz")
# the sweep's fields that describe its run rather than its results
# Table 3's sections computed from the CiC evaluation file (the passages each question was given)
DATA_SECTIONS = frozenset({"selection_recall", "heads_after_before"})
SWEEP_RUN_KEYS = frozenset({"seconds_this_run", "seconds_generating_total", "machine", "question_id_file"})


def committed_files() -> list[Path]:
    """Every file git tracks under bench/results."""
    listed = subprocess.run(["git", "ls-files", "bench/results"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return [REPO / name for name in listed]


def compare_reports(files: list[Path]) -> list[Path]:
    """The committed ``icr2 compare`` reports: a report.json naming pipelines and hashes, with a cache beside it."""
    found = []
    for path in files:
        if path.name != "report.json" or not any((path.parent / n).exists() for n in CACHE_NAMES[:2]):
            continue
        run = json.loads(path.read_text(encoding="utf-8")).get("run") or {}
        if isinstance(run.get("pipelines"), dict) and "question_ids" in run:
            found.append(path)
    return found


def check_compare(report_json: Path, tmp: Path) -> tuple[int, list[str]]:
    from icr2_components.evaluation.compare.recorded import figure_differences, rerender_as_recorded

    done = rerender_as_recorded(report_json, tmp, repo=REPO)
    notes = [] if done.dataset_matches else [f"question set {done.dataset}: not the recorded SHA-256"]
    committed = json.loads(report_json.read_text(encoding="utf-8"))
    return done.answers_read, notes + figure_differences(committed, json.loads((tmp / "report.json").read_text()))


def check_reproduce_cub(report_json: Path, tmp: Path) -> tuple[int, list[str]]:
    sys.path.insert(0, str(REPO / "bench"))
    from reproduce_reports_from_cache import cub_report, render

    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.compare.recorded import figure_differences

    committed = json.loads(report_json.read_text(encoding="utf-8"))
    report = cub_report(committed)
    render("cub", report, tmp)
    hashes = {info["hash"] for info in committed["run"]["pipelines"].values()}
    read = sum(1 for r in read_answer_records(report_json.parent / "compare_answers.jsonl.gz")
               if r["pipeline_hash"] in hashes)
    return read, figure_differences(committed, json.loads((tmp / "report.json").read_text()))


def check_position_sweep(report_json: Path, tmp: Path) -> tuple[int, list[str]]:
    from icr2_components.evaluation.compare.recorded import RUN_TIME_KEYS, figure_differences

    committed = json.loads(report_json.read_text(encoding="utf-8"))
    cache = report_json.parent / "answers.jsonl.gz"
    shutil.copy(cache, tmp / cache.name)
    ids_file = REPO / "bench" / "data" / Path(committed["question_id_file"]).name
    command = [sys.executable, str(REPO / "bench" / "position_sweep.py"), "--report-only", "--out", str(tmp),
               "--questions", str(committed["questions_asked_for"]), "--question-ids", str(ids_file),
               "--max-new-tokens", str(committed["max_new_tokens"]), "--seed", str(committed["seed"]),
               "--positions-10", ",".join(map(str, committed["positions"].get("10", []))),
               "--positions-20", ",".join(map(str, committed["positions"].get("20", []))),
               "--ratios", ",".join(str(r) for r in committed.get("ratios") or [])]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    fresh = json.loads((tmp / report_json.name).read_text())
    read = sum(1 for line in subprocess.run(["gzip", "-dc", str(cache)], capture_output=True, text=True,
                                            check=True).stdout.splitlines() if line.strip())
    return read, figure_differences(committed, fresh, RUN_TIME_KEYS | SWEEP_RUN_KEYS)


def check_curve_experiment(report_json: Path, tmp: Path) -> tuple[int, list[str]]:
    """A committed ``icr2 reproduce`` curve experiment (lost-in-the-middle, kv-retrieval, icr2-benchmark): its data
    prepared again from the shared data, its compare answers read as written under the recorded pipeline hashes
    and scored with that data's gold, then the experiment's own report code."""
    from icr2_components.evaluation.compare.recorded import RUN_TIME_KEYS, figure_differences, recorded_records
    from icr2_components.evaluation.experiments import get_experiment
    from icr2_components.evaluation.experiments.report import build_report
    from icr2_components.evaluation.experiments.runner import scored_answers, split_question_id

    committed = json.loads(report_json.read_text(encoding="utf-8"))
    experiment = get_experiment(committed["experiment"]["name"])
    run = committed["run"]
    for key in ("budgets", "ratios"):  # icr2-benchmark's conditions follow the budgets and ratios it ran
        if key in run:
            setattr(experiment, key, run[key])
    refused = {r["condition"] for r in committed["refused"]}
    kept = [c for c in experiment.select(run["conditions_asked"]) if c.name not in refused]
    prepared = experiment.prepare(kept, run["limit"], tmp / "data", progress=False)
    budget = run["max_new_tokens"]
    variants = {v.name for v in experiment.variants()}
    hashes = {name: info["hash"] for name, info in run["pipelines"].items()}
    main = {n: h for n, h in hashes.items() if n in variants}
    references = {n: h for n, h in hashes.items() if n not in variants}
    from icr2_components.kilt.questions import dataset_question_ids

    main_ids, _, _ = dataset_question_ids(str(prepared.conditions_file))  # compare asked every condition question
    *_, main_records, _, _ = recorded_records(report_json.parent / "compare_answers.jsonl.gz", main,
                                             prepared.conditions_file, main_ids, ["corpus"], budget)
    scores, _ = scored_answers(experiment, {"run": {"pipelines": {n: {"hash": h} for n, h in main.items()},
                                                    "question_ids": main_ids}}, "corpus", main_records)
    by_cell: dict[str, dict[str, dict[str, bool]]] = {}
    for variant, answers in scores.items():
        for question_id, right in answers.items():
            base, condition = split_question_id(question_id)
            by_cell.setdefault(variant, {}).setdefault(condition, {})[base] = right
    reference_records: list[dict] = []
    reference_scores: dict = {}
    if references and prepared.references_file is not None:
        reference_ids, _, _ = dataset_question_ids(str(prepared.references_file))
        *_, reference_records, _, _ = recorded_records(report_json.parent / "references_answers.jsonl.gz",
                                                      references, prepared.references_file, reference_ids, ["open"],
                                                      budget)
        reference_scores, _ = scored_answers(experiment, {"run": {"pipelines": {n: {"hash": h} for n, h in
                                                                              references.items()},
                                                                  "question_ids": reference_ids}},
                                             "open", reference_records)
    report = build_report(experiment, kept, by_cell, reference_scores, prepared, seed=committed["statistics"]["seed"])
    report["refused"] = committed["refused"]
    report["run"] = run
    if hasattr(experiment, "add_paired"):
        scored = {"compare": main_records, "references": reference_records}
        report = experiment.add_paired(report, SimpleNamespace(out=tmp), scored)
    # the experiment section describes the protocol (its registered size and parts, as worded now), not results
    return len(main_records) + len(reference_records), figure_differences(committed, report,
                                                                          RUN_TIME_KEYS | {"experiment"})


def check_table3(report_json: Path, tmp: Path) -> tuple[int, list[str]]:
    """ICR2 Table 3 (``bench/icr2_table3/run.py report`` into ``tmp``); its selection recall reads the CiC
    evaluation file that ``run.py data`` builds (about an hour), so without it the report is not re-rendered."""
    import importlib.util

    from icr2_components.evaluation.compare.recorded import RUN_TIME_KEYS, figure_differences
    from icr2_components.evaluation.reports.arms_report import load_arm

    spec = importlib.util.spec_from_file_location("icr2_table3_run", REPO / "bench" / "icr2_table3" / "run.py")
    table3 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table3)

    table3.cmd_report(None, tmp)
    read = 0
    for path in sorted((report_json.parent / "arms").glob("*/answers.jsonl.gz")):
        pipeline, context_type = table3.ARMS[path.parent.name]
        read += len(load_arm(path, context_type, pipeline))
    committed, fresh = json.loads(report_json.read_text()), json.loads((tmp / "report.json").read_text())
    if (table3.DATA / "eval.jsonl").exists():
        return read, figure_differences(committed, fresh)
    # without the CiC evaluation file only the passage-selection sections cannot be computed: the rest is compared
    differences = figure_differences(committed, fresh, RUN_TIME_KEYS | DATA_SECTIONS)
    if differences:
        return read, differences
    raise NotBuilt(f"{read} answers read, asked 0: every other figure identical; {', '.join(sorted(DATA_SECTIONS))} "
                   f"need {table3.DATA.relative_to(REPO)}/eval.jsonl (bench/icr2_table3/run.py data)")


class NotBuilt(Exception):
    """A re-render that needs data this checkout has not built: listed, never counted identical."""


def handlers(files: list[Path]) -> dict[Path, Callable[[Path, Path], tuple[int, list[str]]]]:
    """Each committed report with a cache, and how it is re-rendered."""
    chosen: dict[Path, Callable[[Path, Path], tuple[int, list[str]]]] = {
        path: check_compare for path in compare_reports(files)}
    chosen[RESULTS / "reproduce" / "cub" / "report.json"] = check_reproduce_cub
    chosen[RESULTS / "position_sweep" / "position_sweep.json"] = check_position_sweep
    chosen[RESULTS / "icr2_table3" / "report.json"] = check_table3
    for path in files:
        if (path.parent.parent == RESULTS / "reproduce" and path.parent.name != "cub" and path.suffix == ".json"
                and path.name.startswith("report")):
            chosen[path] = check_curve_experiment
    return chosen


def uncovered(files: list[Path], covered: set[Path]) -> list[Path]:
    """Committed reports with an answer cache in their folder that no re-render here covers."""
    folders = {path.parent for path in files if path.name in CACHE_NAMES}
    folders |= {path.parent.parent.parent for path in files
                if path.name in CACHE_NAMES and path.parent.parent.name == "arms"}  # icr2_table3/arms/ARM
    return sorted(path for path in files if path.parent in folders and path.suffix == ".json"
                  and path.name.startswith(("report", "position_sweep")) and path not in covered)


def main() -> int:
    arguments = sys.argv[1:]
    files = committed_files()
    chosen = handlers(files)
    if "--write" in arguments:
        from icr2_components.evaluation.compare.recorded import rerender_as_recorded

        name = arguments[arguments.index("--write") + 1]
        report_json = RESULTS / name / "report.json"
        if chosen.get(report_json) is not check_compare:
            print(f"{name}: not a committed compare report ({report_json})", file=sys.stderr)
            return 2
        os.chdir(REPO)  # the report names its files relative to the repository
        rerender_as_recorded(report_json.relative_to(REPO), report_json.parent.relative_to(REPO), repo=REPO)
        print(f"{report_json.parent.relative_to(REPO)}: re-rendered from its cache as written")
        return 0
    rows, failed = [], False
    for report_json, check in sorted(chosen.items()):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                read, differences = check(report_json, Path(tmp))
            except NotBuilt as missing:
                failed = True
                rows.append((str(report_json.relative_to(REPO)), "-", "-", f"NOT CHECKED: {missing}"))
                continue
        failed |= bool(differences)
        rows.append((str(report_json.relative_to(REPO)), read, 0, "yes" if not differences else "NO"))
        for difference in differences:
            print(f"  {report_json.relative_to(REPO)}: {difference}")
    for path in uncovered(files, set(chosen)):
        failed = True
        rows.append((str(path.relative_to(REPO)), "-", "-", "NOT CHECKED (no re-render here)"))
    width = max(len(r[0]) for r in rows)
    print(f"{'report':<{width}}  answers read  asked  identical")
    for name, read, asked, same in rows:
        print(f"{name:<{width}}  {read!s:>12}  {asked!s:>5}  {same}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
