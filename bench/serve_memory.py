"""Memory of several pipelines served by one ``icr2 serve`` process against one process per pipeline.

Starts ``icr2 serve vanilla_rag rap adaptive_rag`` (one process), waits for ``/health/ready``, asks each pipeline one
question (so that what a first request allocates is counted), and reads the process's memory; then stops it, starts
the three pipelines as three processes at once the same way, and reads each. Memory is read with psutil: RSS (what
``top`` shows; pages shared between processes, such as the Python and torch libraries, are counted in each), PSS
(shared pages divided among the processes sharing them: the sum over processes is what they use together) and USS
(pages only that process holds). The pipelines' shared reader (SmolLM2) and index (the bundled KILT sample) are
loaded once in the one process (the process-wide model cache and index handles) and once per process otherwise.

    OMP_NUM_THREADS=1 .venv/bin/python bench/serve_memory.py [--pipelines vanilla_rag,rap,adaptive_rag]

Writes ``bench/results/serve_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
ICR2 = str(Path(sys.executable).parent / "icr2")
MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(pipelines: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(log, "w") as output:
        process = subprocess.Popen([ICR2, "serve", *pipelines, "--port", str(port), "--max-new-tokens", "4"],
                                   cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


def wait_ready(process: subprocess.Popen, url: str, log: Path, timeout: float = 900) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"icr2 serve exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready in {timeout} s")


def ask(url: str, pipeline: str) -> str:
    response = httpx.post(f"{url}/{pipeline}/run", json={"query": "Who wrote Hamlet?"}, timeout=600)
    response.raise_for_status()
    return response.json()["result"]["replies"][0]


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (MiB) of the process and its children."""
    total = {"rss_mib": 0.0, "pss_mib": 0.0, "uss_mib": 0.0}
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        info = process.memory_full_info()
        total["rss_mib"] += info.rss / MIB
        total["pss_mib"] += getattr(info, "pss", 0) / MIB
        total["uss_mib"] += info.uss / MIB
    return {key: round(value, 1) for key, value in total.items()}


def stop(process: subprocess.Popen) -> int:
    process.terminate()
    try:
        return process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default="vanilla_rag,rap,adaptive_rag")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "serve_memory.json"))
    args = parser.parse_args()
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    logs = Path(tempfile.mkdtemp(prefix="icr2-serve-memory-"))  # the servers' output, for a failure's message
    together: dict = {}
    one, url = start(pipelines, logs / "one_process.log")
    try:
        ready_s = wait_ready(one, url, logs / "one_process.log")
        replies = {name: ask(url, name) for name in pipelines}
        time.sleep(1)
        together.update(memory=memory(one.pid), ready_s=round(ready_s, 1), replies=replies)
    finally:
        together["exit"] = stop(one)
    print(f"one process, {len(pipelines)} pipelines: {together['memory']} (ready in {together['ready_s']} s)")

    started = {name: start([name], logs / f"{name}.log") for name in pipelines}
    apart: dict[str, dict] = {}
    try:
        for name, (process, url) in started.items():
            apart[name] = {"ready_s": round(wait_ready(process, url, logs / f"{name}.log"), 1)}
        for name, (_process, url) in started.items():
            apart[name]["reply"] = ask(url, name)
        time.sleep(1)
        for name, (process, _url) in started.items():  # read while all run: PSS divides what they share
            apart[name]["memory"] = memory(process.pid)
    finally:
        for name, (process, _url) in started.items():
            apart.setdefault(name, {})["exit"] = stop(process)
    sums = {key: round(sum(entry["memory"][key] for entry in apart.values()), 1)
            for key in ("rss_mib", "pss_mib", "uss_mib")}
    for name, entry in apart.items():
        print(f"  {name} alone: {entry['memory']}")
    print(f"{len(pipelines)} processes: {sums}")
    ratios = {key: round(sums[key] / together["memory"][key], 2) for key in sums if together["memory"][key]}
    print(f"three processes / one process: {ratios}")
    result = {
        "what": "memory of the pipelines served by one icr2 serve process against one process each, after loading "
                "and one request per pipeline (psutil; MiB)",
        "pipelines": pipelines,
        "one_process": together,
        "one_process_per_pipeline": apart,
        "one_process_per_pipeline_total": sums,
        "ratio_processes_over_one": ratios,
        "saved_mib": {key: round(sums[key] - together["memory"][key], 1) for key in sums},
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
