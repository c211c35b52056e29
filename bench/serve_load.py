"""Concurrent load on `icr2 serve pipelines/closed_book.yaml` over loopback: N clients at once, twice.

Starts the real CLI server in a subprocess on a free loopback port and sends --requests NQ questions from the
bundled sample (cycled) with --concurrency in flight: first against an unbounded server (--max-queue large: every
request waits for the one pipeline run; the baseline), then against a bounded one (--max-queue, default 8), whose
429s carry Retry-After: each client waits that long and asks again, as the openai client does, until its question
is answered. The server's resident memory is sampled every 0.1 s (peak over its memory when ready). Then, on the
bounded server, a batch of malformed requests that must all get 4xx: among them a question over --max-query-chars
(422) and one within it whose prompt is longer than the model's context (413 context_too_long, reached only
because the server is started with a --max-query-chars that lets it through).

Passes when every question is answered (no admitted request lost), the only other answers are the bounded
server's documented 429s, and every malformed request got a 4xx with a reason. Prints, per run, answers, 429s,
latency p50/p99 (retries included) and peak memory growth, and the bounded/unbounded ratios; writes
bench/results/serve_load.json.

    .venv/bin/python bench/serve_load.py --requests 50 --concurrency 50 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MALFORMED = [
    (b'{"query": "unterminated', "malformed JSON"),
    (b"", "empty body"),
    (b"{}", "missing query"),
    (b'{"query": 42}', "query not a string"),
    (b'{"query": ""}', "empty query"),
    (b'{"query": "   "}', "blank query"),
    (b'{"query": "who?", "extra": 1}', "unknown field"),
    (b'["who?"]', "array body"),
    (b'"who?"', "string body"),
    (b'{"query": null}', "null query"),
]
# about 6,000 words, ~54,000 characters (under the default 64 KiB body), far more tokens than SmolLM2's 8,192
OVER_CONTEXT_QUESTION = " ".join(f"word{i}" for i in range(6000))


def server_rss_bytes(pid: int) -> int | None:
    """The resident memory of a process (Linux /proc), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_load(args, questions: list[str], max_queue: int, check_malformed: bool) -> dict:
    """Start a server with ``--max-queue max_queue``, send the load (retrying 429s after Retry-After), sample its
    memory; returns the figures of this run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    name = Path(args.pipeline).stem
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.perf_counter()
    server = subprocess.Popen([str(Path(sys.executable).parent / "icr2"), "serve", args.pipeline, "--port", str(port),
                               "--max-new-tokens", str(args.max_new_tokens), "--max-query-chars",
                               str(args.max_query_chars), "--max-queue", str(max_queue)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    malformed: list[dict] = []
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited with {server.returncode}: {server.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/status", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.perf_counter() - started > 300:
                raise RuntimeError("server not ready in 300 s")
            time.sleep(0.5)
        startup_s = time.perf_counter() - started
        ready_rss = server_rss_bytes(server.pid) or 0
        peak = [ready_rss]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.1):
                peak[0] = max(peak[0], server_rss_bytes(server.pid) or 0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        print(f"--max-queue {max_queue}: server ready in {startup_s:.1f} s ({ready_rss / 2**20:.0f} MiB); "
              f"{args.requests} requests, {args.concurrency} at a time, max_new_tokens {args.max_new_tokens}",
              flush=True)
        client = httpx.Client(base_url=url, timeout=args.request_timeout,
                              limits=httpx.Limits(max_connections=args.concurrency))
        finished, lock = [0], threading.Lock()
        load_start = time.perf_counter()

        def ask(i: int) -> dict:
            query = questions[i % len(questions)]
            t0 = time.perf_counter()
            busy, statuses = 0, []
            while True:
                try:
                    response = client.post(f"/{name}/run", json={"query": query})
                except Exception as error:  # counted, never dropped
                    result = {
                        "i": i,
                        "status": None,
                        "ok": False,
                        "busy": busy,
                        "answer": f"{type(error).__name__}: {error}",
                    }
                    break
                statuses.append(response.status_code)
                if response.status_code == 429 and response.headers.get("retry-after", "").isdigit() \
                        and response.json().get("error") == "server_busy":
                    busy += 1  # the documented refusal: wait as told, ask again
                    time.sleep(int(response.headers["retry-after"]))
                    if time.perf_counter() - load_start < args.deadline:
                        continue
                ok = response.status_code == 200 and bool(response.json()["result"]["replies"])
                result = {"i": i, "status": response.status_code, "ok": ok, "busy": busy,
                          "answer": response.json()["result"]["replies"][0] if ok else response.text[:200]}
                break
            result.update(latency_s=time.perf_counter() - t0, statuses=sorted(set(statuses)))
            with lock:
                finished[0] += 1
                if finished[0] % 10 == 0 or finished[0] == args.requests:
                    print(f"  {finished[0]}/{args.requests} answered, {time.perf_counter() - load_start:.0f} s",
                          flush=True)
            return result

        with ThreadPoolExecutor(args.concurrency) as pool:
            futures = [pool.submit(ask, i) for i in range(args.requests)]
            done, not_done = wait(futures, timeout=args.deadline + args.request_timeout)
            for future in not_done:
                future.cancel()
            results = [future.result() for future in done]
        wall = time.perf_counter() - load_start
        sampling.set()
        sampler.join()

        if check_malformed:
            for body, what in MALFORMED:
                response = client.post(f"/{name}/run", content=body, headers={"content-type": "application/json"})
                malformed.append({"case": what, "status": response.status_code,
                                  "reason": response.json().get("reason") if response.headers.get(
                                      "content-type", "").startswith("application/json") else response.text[:200]})
            over_limit = [
                ({"query": "x" * (args.max_query_chars + 1)}, "query over max chars"),
                ({"query": OVER_CONTEXT_QUESTION}, "prompt over context"),
                ({"query": "x" * 70_000}, "oversize body (70 KB)"),
            ]
            for body, what in over_limit:
                response = client.post(f"/{name}/run", json=body)
                malformed.append(
                    {"case": what, "status": response.status_code, "reason": response.json().get("reason")}
                )
        client.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()

    errors = [r for r in results if not r["ok"]]
    latencies = [r["latency_s"] for r in results if r["ok"]]
    return {
        "max_queue": max_queue, "answered": len(results) - len(errors), "errors": len(errors),
        "unfinished": args.requests - len(results), "busy_answers": sum(r["busy"] for r in results),
        "clients_told_busy": sum(1 for r in results if r["busy"]),
        "other_statuses": sorted({s for r in results for s in r["statuses"]} - {200, 429}),
        "wall_s": wall, "throughput_rps": (len(latencies) / wall) if wall else None, "startup_s": startup_s,
        "latency_s": {**dict(zip(("p50", "p90", "p99"), map(float, np.percentile(latencies, [50, 90, 99])))),
                      "mean": statistics.fmean(latencies), "min": min(latencies), "max": max(latencies)}
        if latencies else None,
        "rss_ready_mib": ready_rss / 2**20, "rss_peak_mib": peak[0] / 2**20,
        "rss_growth_mib": (peak[0] - ready_rss) / 2**20,
        "malformed": malformed, "error_samples": errors[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default="pipelines/closed_book.yaml")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=50, help="clients at once (default 50)")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--max-queue", type=int, default=8, help="the bounded server's --max-queue (default 8)")
    parser.add_argument("--baseline-max-queue", type=int, default=10_000,
                        help="the baseline server's --max-queue (default 10000: unbounded in effect)")
    parser.add_argument("--deadline", type=float, default=1800, help="seconds for a load phase (default 1800)")
    parser.add_argument("--request-timeout", type=float, default=900)
    parser.add_argument("--max-query-chars", type=int, default=60_000,
                        help="the server's limit; above the over-long question's length, so it reaches the reader")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_load.json"))
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1 or args.max_queue < 0:
        parser.error("--requests and --concurrency must be >= 1, --max-queue >= 0")

    from icr2_components.kilt import build_sample, read_kilt_tasks

    questions = [t.input for t in read_kilt_tasks(build_sample().tasks) if t.input.strip()]
    baseline = run_load(args, questions, args.baseline_max_queue, check_malformed=False)
    bounded = run_load(args, questions, args.max_queue, check_malformed=True)
    bad_4xx = [m for m in bounded["malformed"] if not (400 <= m["status"] < 500 and m["reason"])]
    ratio = {
        "rss_growth": (bounded["rss_growth_mib"] / baseline["rss_growth_mib"]) if baseline["rss_growth_mib"] else None,
        "latency_p50": (bounded["latency_s"]["p50"] / baseline["latency_s"]["p50"])
        if bounded["latency_s"] and baseline["latency_s"] else None,
        "throughput": (bounded["throughput_rps"] / baseline["throughput_rps"])
        if bounded["throughput_rps"] and baseline["throughput_rps"] else None,
    }
    load = os.getloadavg()
    figures = {
        "pipeline": args.pipeline, "requests": args.requests, "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens, "baseline": baseline, "bounded": bounded,
        "bounded_over_baseline": ratio, "malformed_not_4xx": len(bad_4xx),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1"),
                    "load_average_at_end": [round(x, 1) for x in load]},
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=2))
    print(
        f"{'server':<22} {'answered':>9} {'errors':>7} {'429s':>6} {'p50 s':>7} {'p99 s':>7} {'req/s':>6} "
        f"{'peak RSS growth':>16}"
    )
    for label, run in (("unbounded (baseline)", baseline), (f"--max-queue {args.max_queue}", bounded)):
        lat = run["latency_s"] or {"p50": float("nan"), "p99": float("nan")}
        print(
            f"{label:<22} {run['answered']:>5}/{args.requests:<3} {run['errors']:>7} {run['busy_answers']:>6} "
            f"{lat['p50']:>7.2f} {lat['p99']:>7.2f} {run['throughput_rps'] or 0:>6.2f} {run['rss_growth_mib']:>12.0f} "
            "MiB"
        )
    print("bounded / baseline: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items() if v is not None))
    for m in bounded["malformed"]:
        print(f"  malformed: {m['case']:<22} -> {m['status']}  {m['reason']}")
    print(f"malformed not answered 4xx with a reason: {len(bad_4xx)}; load average {load[0]:.1f}; wrote {args.out}")
    ok = all(not run["errors"] and not run["unfinished"] and not run["other_statuses"] for run in (baseline, bounded))
    return 0 if ok and not bad_4xx else 1


if __name__ == "__main__":
    sys.exit(main())
