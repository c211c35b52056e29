"""Bad inputs through every surface a user meets: the `icr2` command, the `icr2 serve` server over HTTP, and the
library's components called directly; what each gets, and whether that is right.

The cases live in ``bench/bad_input_cases/``, one module a surface: ``cli_cases`` (real bad files, dead ports,
servers answering garbage or 503, the shipped Elasticsearch config on a fresh cache, run as subprocesses),
``http_cases`` (one real ``icr2 serve`` on a free loopback port, many bad requests, a trickling client),
``security_cases`` (a real ``icr2 serve`` with API keys: missing, wrong and revoked keys, keys in the query,
repeated and oversized headers, injected request ids, unserved pipelines, path tricks, foreign origins, rate limits),
``component_cases`` (run-time parameters out of range, of the wrong type or not finite, empty or None contents,
oversized prompts, bad names and files, tampered artifacts, in this process) and ``library_cases`` (the library's
readers called on bad files: tables read leniently, question sets, corpora of every format, configurations holding
NaN, infinity or a boolean, skip reports, in this process). Every case runs under a time limit: a process that does
not exit, a request not answered or a call not returned in time is a ``hang``. Each outcome is classified from what
the run shows, never from the case's name (the classes are described in ``bad_input_cases/common.py``): clear
error, right result, traceback, raw crash, silent wrong result, data loss, unclear error, hang. Setup steps (marked
``(setup: ...)`` or in parentheses) are checked too but not counted among the bad inputs.

The table goes to stdout and to ``bench/results/bad_inputs.md``, the records to ``bench/results/bad_inputs.json``.
Needs the project's Elasticsearch node (``bash scripts/elasticsearch.sh start``; ``ICR2_ES_URL`` to point
elsewhere) and the llama.cpp server (``bash scripts/llama_server.sh start``; ``ICR2_LLAMA_URL``). Exits 1 when any
input gets anything but a clear error or a right result.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bad_inputs.py [--surfaces cli,http,component,library] [--only TEXT,...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import json
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter

from bad_input_cases.common import (
    CLASSES,
    ERROR_LINE,
    ES_URL,
    GOOD_CLASSES,
    ICR2,
    REPO,
    classify,
    outcome,
    timed_out,
)
from tqdm import tqdm

SURFACES = ("cli", "http", "component", "library")
SURFACE_NAMES = ("CLI", "HTTP", "component", "library")


def run_cli(tmp: Path, only: list[str] | None) -> list[dict]:
    from bad_input_cases import cli_cases

    results = []
    tried = [c for c in cli_cases.cases(tmp) if only is None or c.setup
             or any(o.lower() in c.what.lower() for o in only)]
    for case in tqdm(tried, desc="CLI", unit=" case"):
        start = time.perf_counter()
        try:
            if case.runner is not None:
                result = case.runner()
            else:
                result = subprocess.run(ICR2 + case.argv, capture_output=True, text=True, cwd=REPO,
                                        timeout=case.timeout_s, env={**os.environ, **case.env})
        except subprocess.TimeoutExpired as error:  # a hang is an outcome: the process was killed at the limit
            result = timed_out(case.argv, error)
        except Exception as error:  # the case's own preparation failed (after a failed setup step): counted, not fatal
            result = subprocess.CompletedProcess(case.argv, -1, "", f"bench: the case could not run: {error!r}")
        seconds = round(time.perf_counter() - start, 1)
        kind, observed = classify(case, result)
        results.append({
            "surface": "CLI", "input": case.what, "setup": case.setup, "exit": result.returncode, "class": kind,
            "observed": observed, "traceback": "Traceback" in result.stderr,
            "stderr_lines": len([line for line in result.stderr.splitlines() if ERROR_LINE.match(line)]),
            "outcome": outcome(result), "seconds": seconds,
        })
    return results


def _delete_bench_indexes() -> None:
    """Delete the icr2-bad-* indexes this run made (by name: Elasticsearch 8 refuses wildcard deletes)."""
    try:
        with urllib.request.urlopen(f"{ES_URL}/_cat/indices/icr2-bad-*?format=json", timeout=30) as response:
            names = [row["index"] for row in json.loads(response.read())]
        for name in names:
            urllib.request.urlopen(urllib.request.Request(f"{ES_URL}/{name}", method="DELETE"), timeout=30).read()
    except OSError as error:
        print(f"(could not delete the icr2-bad-* indexes: {error})")


def table(results: list[dict]) -> str:
    lines = ["| surface | bad input | exit / status | class | what the user gets | observed | s |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = [str(r[k]).replace("|", "\\|").replace("\n", " ") for k in ("surface", "input", "exit", "class",
                                                                              "outcome", "observed")]
        lines.append("| " + " | ".join(cells) + f" | {r['seconds']:.0f} |")
    return "\n".join(lines)


def summary(results: list[dict]) -> str:
    counted = [r for r in results if not r["setup"]]
    totals = Counter(r["class"] for r in counted)
    per_surface = Counter(r["surface"] for r in counted)
    return (f"{len(counted)} bad inputs ({', '.join(f'{per_surface[s]} {s}' for s in SURFACE_NAMES)}"
            f"; + {len(results) - len(counted)} setup steps): "
            + ", ".join(f"{totals.get(c, 0)} {c}" for c in CLASSES))


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--surfaces", default=",".join(SURFACES),
                        help="comma-separated subset of cli,http,component,library")
    parser.add_argument("--only", default=None, help="run only the cases whose input contains one of these "
                        "comma-separated texts (and the setup steps); the results files are then not written")
    args = parser.parse_args()
    only = [o.strip() for o in args.only.split(",")] if args.only else None
    surfaces = [s.strip() for s in args.surfaces.split(",")]
    results: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="icr2-bad-") as folder:
        tmp = Path(folder)
        if "cli" in surfaces:
            (tmp / "cli").mkdir()
            results += run_cli(tmp / "cli", only)
            _delete_bench_indexes()
        if "http" in surfaces:
            from bad_input_cases import http_cases

            (tmp / "http").mkdir()
            results += http_cases.run(tmp / "http", only, lambda xs: tqdm(xs, desc="HTTP", unit=" request"))
            from bad_input_cases import security_cases  # a server with API keys: keys, headers, paths, origins

            results += security_cases.run(tmp / "http", only, lambda xs: tqdm(xs, desc="HTTP security", unit=" case"))
        if "component" in surfaces:
            from bad_input_cases import component_cases

            (tmp / "component").mkdir()
            results += component_cases.run(tmp / "component", only,
                                           lambda xs: tqdm(xs, desc="components", unit=" call"))
        if "library" in surfaces:
            from bad_input_cases import library_cases

            (tmp / "library").mkdir()
            results += library_cases.run(tmp / "library", only, lambda xs: tqdm(xs, desc="library", unit=" call"))
        for r in results:
            for key in ("outcome", "observed"):
                r[key] = str(r[key]).replace(folder, "<tmp>")
    minutes = (time.perf_counter() - started) / 60
    text = table(results) + "\n\n" + summary(results) + f" ({minutes:.1f} minutes)"
    print(text)
    bad = [f"{r['surface']}: {r['input']}" for r in results if r["class"] not in GOOD_CLASSES]
    if bad:
        print(f"not a clear error nor a right result: {bad}")
    if only is not None or set(surfaces) != set(SURFACES):
        return 1 if bad else 0
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    counted = [r for r in results if not r["setup"]]
    totals = Counter(r["class"] for r in counted)
    (out / "bad_inputs.json").write_text(json.dumps({
        "totals": {c: totals.get(c, 0) for c in CLASSES},
        "by_surface": {s: dict(Counter(r["class"] for r in counted if r["surface"] == s))
                       for s in SURFACE_NAMES},
        "minutes": round(minutes, 1), "cases": results}, indent=2))
    (out / "bad_inputs.md").write_text(text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
