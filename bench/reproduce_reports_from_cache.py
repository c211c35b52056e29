"""Re-render committed ``icr2 reproduce`` reports from what is committed, asking no model: CUB's report recomputed
from its committed answer cache (compare's BCU cells, faithfulness on the paired questions, the Pareto front, the
paired tests), and the size note of every report (a part of a registered run says so) from its ``run`` section.

    .venv/bin/python bench/reproduce_reports_from_cache.py [--check]

``--check`` writes nothing and exits 1 when a committed report differs from what the code renders now.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "reproduce"


def cub_report(committed: dict) -> dict:
    """CUB's report rebuilt from its committed answer cache with today's report code; the run's own facts (its
    settings, counters, timings) are kept as they were recorded."""
    from icr2_components.evaluation.compare.cache import read_answer_records
    from icr2_components.evaluation.experiments import get_experiment
    from icr2_components.evaluation.experiments.cub import MEMORY
    from icr2_components.evaluation.reports.compare_report import build_report

    cache = RESULTS / "cub" / "compare_answers.jsonl.gz"
    run = committed["run"]
    names = list(run["pipelines"])
    by_hash = {info["hash"]: name for name, info in run["pipelines"].items()}
    records = [r for r in read_answer_records(cache) if r["pipeline_hash"] in by_hash]
    for record in records:
        record["pipeline"] = by_hash[record["pipeline_hash"]]
    types = committed["context_types"]
    question_ids = sorted({r["question_id"] for r in records})
    specs = [SimpleNamespace(name=name, context_input=None if name == MEMORY else "documents", data={})
             for name in names]
    seed = committed["statistics"]["seed"]
    not_built = committed["questions"]["contexts_not_built"]
    compared = build_report(records, specs, types, baseline="vanilla_rag", seed=seed, questions=len(question_ids),
                            not_built=not_built)
    compared["run"] = {"pipelines": run["pipelines"], "question_ids": question_ids, "cache": str(cache),
                       "questions": committed["questions"]["drawn"], "missing_contexts": not_built,
                       "backend": run["backend"], "max_new_tokens": run.get("compare_max_new_tokens"),
                       "counters": run["counters"], "generation_seconds": run.get("generation_seconds"),
                       "question_ids_file": run.get("question_ids_file"), "dataset": run.get("dataset")}
    compared["files"] = {"html": run["compare_reports"]["answers"]}
    experiment = get_experiment("cub")
    techniques = [name for name in names if name != MEMORY]
    settings = SimpleNamespace(seed=seed, out=Path(run["out"]), max_new_tokens=run["max_new_tokens"],
                               reuse_prompt_prefix=run.get("reuse_prompt_prefix", False), limit=run["limit"],
                               conditions_asked=run["conditions_asked"], options={},
                               at_registered_size=lambda size: run["at_registered_size"])
    report = experiment.build(compared, techniques, committed["refused"], types, settings)
    report["run"] = run  # the run as it was recorded (its backend, budget, counters, timings)
    return report


def render(name: str, report: dict, out: Path) -> None:
    from icr2_components.evaluation.experiments import get_experiment
    from icr2_components.evaluation.experiments.report import write_report

    write_report(report, out, get_experiment(name))


def _size_notes(check: bool) -> list[str]:
    """Every committed report's size note as the code words it now (``report*.md``/``.html``)."""
    from icr2_components.evaluation.experiments import get_experiment

    changed = []
    for report_json in sorted(RESULTS.glob("*/report*.json")):
        report = json.loads(report_json.read_text())
        experiment = get_experiment(report["experiment"]["name"])
        run = report["run"]
        old = (f"NOT at the registered size ({report['experiment']['registered_size']} questions, every condition: "
               f"`{report['experiment']['registered_command']}`)")
        new = experiment.size_note(run)
        for page in (report_json.with_suffix(".md"), report_json.with_suffix(".html")):
            text = page.read_text(encoding="utf-8")
            if old in text and new != old:
                changed.append(str(page.relative_to(REPO)))
                if not check:
                    page.write_text(text.replace(old, new), encoding="utf-8")
    return changed


def main() -> int:
    check = "--check" in sys.argv[1:]
    changed = _size_notes(check)
    folder = RESULTS / "cub"
    committed = json.loads((folder / "report.json").read_text())
    report = cub_report(committed)
    with tempfile.TemporaryDirectory() as tmp:
        render("cub", report, Path(tmp))
        fresh = {name: (Path(tmp) / name).read_text(encoding="utf-8") for name in ("report.md", "report.html")}
        fresh_json = json.loads((Path(tmp) / "report.json").read_text())
        for key in ("files",):
            fresh_json[key] = committed.get(key)
        if fresh_json != committed or any(text != (folder / name).read_text(encoding="utf-8")
                                          for name, text in fresh.items()):
            changed.append("bench/results/reproduce/cub (recomputed from its cache)")
            if not check:
                (folder / "report.json").write_text(json.dumps(fresh_json, indent=2, ensure_ascii=False))
                for name, text in fresh.items():
                    (folder / name).write_text(text.replace(str(Path(tmp)) + "/", ""), encoding="utf-8")
                (folder / "cub.png").write_bytes((Path(tmp) / "cub.png").read_bytes())
    print("\n".join(changed) if changed else "every committed report is as the code renders it")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
