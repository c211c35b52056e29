"""Prompt-prefix reuse in process: `icr2 compare --reuse-prompt-prefix` against the same run without it, on
Lost in the Middle's 30-document prompts (the gold document at the paper's 7 positions among the same 29
distractors, so consecutive prompts share the documents before the gold one).

Both runs answer the same questions through `run_compare` with the `lost-in-the-middle` experiment's own
pipelines and conditions file (plain and query-aware prompt, SmolLM2-135M-Instruct in process, fp32, greedy, 32
new tokens), each into a fresh folder, one after the other in one process (the model loaded once, before either
run's clock starts): the baseline is the run without reuse, measured in the same process. It prints the seconds of
generation of each (compare's `generation_seconds`: the pipelines' own time, not the set-up), their ratio, and how
many replies are identical, character for character.

    .venv/bin/python bench/prompt_prefix_reuse.py --questions 1

Writes bench/results/prompt_prefix_reuse.json.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def answers_of(out: Path) -> dict[str, dict]:
    """The cache's records by (question, pipeline)."""
    from icr2_components.evaluation.compare.cache import cache_lines

    records = [json.loads(line) for line in cache_lines(out / "answers.jsonl.gz") if line.strip()]
    return {f"{r['question_id']} {r['pipeline']}": r for r in records}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1, help="the registered set's first N questions (default 1)")
    parser.add_argument("--documents", type=int, choices=(10, 20, 30), default=30)
    parser.add_argument("--out", default=str(RESULTS / "prompt_prefix_reuse.json"))
    args = parser.parse_args()

    from icr2_components.evaluation.compare.run import run_compare
    from icr2_components.evaluation.experiments import get_experiment

    experiment = get_experiment("lost-in-the-middle")
    conditions = experiment.select(f"{args.documents}docs@*")
    work = Path(tempfile.mkdtemp(prefix="prefix_reuse_"))
    variants = [str(p) for p in experiment.write_pipelines(work / "pipelines")[:len(experiment.variants())]]
    prepared = experiment.prepare(conditions, args.questions, work / "data", progress=False)
    load = os.getloadavg()
    runs = {}
    for label, reuse in (("whole prompts", False), ("prefix reused", True)):
        start, out = time.perf_counter(), work / label.replace(" ", "_")
        report = run_compare(variants, dataset=str(prepared.conditions_file), context_types=["corpus"], out_dir=out,
                             max_new_tokens=experiment.registered_max_new_tokens, progress=False,
                             reuse_prompt_prefix=reuse)
        records = answers_of(out)
        latencies = [r["latency_s"] for r in records.values()]
        runs[label] = {"generation_s": report["run"]["generation_seconds"],
                       "wall_s": round(time.perf_counter() - start, 1), "answers": len(records),
                       "median_latency_s": round(statistics.median(latencies), 2), "records": records}
    base, reused = runs["whole prompts"], runs["prefix reused"]
    same = sum(base["records"][k]["answer"] == reused["records"][k]["answer"] for k in base["records"])
    result = {
        "command": "python bench/prompt_prefix_reuse.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": [round(x, 2) for x in load],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "questions": len(prepared.question_ids), "documents": args.documents,
        "prompt_tokens": sorted(r["prompt_tokens"] for r in base["records"].values()),
        "runs": {label: {k: v for k, v in run.items() if k != "records"} for label, run in runs.items()},
        "ratio_generation_s": round(reused["generation_s"] / base["generation_s"], 3),
        "identical_replies": same, "replies": len(base["records"]),
        "different": [{"key": k, "whole": base["records"][k]["answer"], "reused": reused["records"][k]["answer"]}
                      for k in base["records"] if base["records"][k]["answer"] != reused["records"][k]["answer"]],
    }
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(f"{'run':<15} {'answers':>7} {'generation s':>12} {'median s/answer':>15}")
    for label, run in runs.items():
        print(f"{label:<15} {run['answers']:>7} {run['generation_s']:>12.1f} {run['median_latency_s']:>15.2f}")
    machine = result["machine"]
    print(f"ratio (prefix reused / whole prompts): {result['ratio_generation_s']:.3f}; identical replies: "
          f"{same} of {len(base['records'])}; load {machine['load_before']} -> {machine['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
