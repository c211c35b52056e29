"""Concurrent load on `icr2 serve pipelines/closed_book.yaml` over loopback: N requests, C at a time.

Starts the real CLI server in a subprocess on a free loopback port, sends --requests NQ questions from the
bundled sample (cycled) with --concurrency in flight, then a batch of malformed requests that must all get 4xx:
among them a question over --max-query-chars (422) and one within it whose prompt is longer than the model's
context (413 context_too_long, reached only because the server is started with a --max-query-chars that lets it
through).
Bounded: --deadline seconds for the whole load phase (unfinished requests are counted as errors), and every
request has its own timeout. Prints latency p50/p90/p99 and throughput; writes bench/results/serve_load.json.

    .venv/bin/python bench/serve_load.py --requests 50 --concurrency 8 --max-new-tokens 16
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", default="pipelines/closed_book.yaml")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=900, help="seconds for the load phase (default 900)")
    parser.add_argument("--request-timeout", type=float, default=600)
    parser.add_argument("--max-query-chars", type=int, default=60_000,
                        help="the server's limit; above the over-long question's length, so it reaches the reader")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_load.json"))
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1:
        parser.error("--requests and --concurrency must be >= 1")

    from icr2_components.kilt import build_sample, read_kilt_tasks

    questions = [t.input for t in read_kilt_tasks(build_sample().tasks) if t.input.strip()]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    name = Path(args.pipeline).stem
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.perf_counter()
    server = subprocess.Popen([str(Path(sys.executable).parent / "icr2"), "serve", args.pipeline, "--port", str(port),
                               "--max-new-tokens", str(args.max_new_tokens), "--max-query-chars",
                               str(args.max_query_chars)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if server.poll() is not None:
                print(f"server exited with {server.returncode}: {server.stderr.read()[-2000:]}", file=sys.stderr)
                return 1
            try:
                if httpx.get(f"{url}/status", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.perf_counter() - started > 300:
                print("server not ready in 300 s", file=sys.stderr)
                return 1
            time.sleep(0.5)
        startup_s = time.perf_counter() - started
        print(f"server ready in {startup_s:.1f} s at {url}/{name}/run; {args.requests} requests, "
              f"{args.concurrency} at a time, max_new_tokens {args.max_new_tokens}", flush=True)

        client = httpx.Client(base_url=url, timeout=args.request_timeout,
                              limits=httpx.Limits(max_connections=args.concurrency))

        import threading

        finished, lock = [0], threading.Lock()

        def ask(i: int) -> dict:
            result = _ask(i)
            with lock:
                finished[0] += 1
                if finished[0] % 5 == 0 or finished[0] == args.requests:
                    print(f"  {finished[0]}/{args.requests} answered, {time.perf_counter() - load_start:.0f} s",
                          flush=True)
            return result

        def _ask(i: int) -> dict:
            query = questions[i % len(questions)]
            t0 = time.perf_counter()
            try:
                response = client.post(f"/{name}/run", json={"query": query})
                latency = time.perf_counter() - t0
                ok = response.status_code == 200 and bool(response.json()["result"]["replies"])
                answer = response.json()["result"]["replies"][0] if ok else response.text[:200]
                return {"i": i, "status": response.status_code, "ok": ok, "latency_s": latency, "answer": answer}
            except Exception as error:  # counted, never dropped
                return {"i": i, "status": None, "ok": False, "latency_s": time.perf_counter() - t0,
                        "answer": f"{type(error).__name__}: {error}"}

        load_start = time.perf_counter()
        results = []
        with ThreadPoolExecutor(args.concurrency) as pool:
            futures = [pool.submit(ask, i) for i in range(args.requests)]
            done, not_done = wait(futures, timeout=args.deadline)
            for future in not_done:
                future.cancel()
            results = [future.result() for future in done]
        wall = time.perf_counter() - load_start
        unfinished = args.requests - len(results)
        errors = [r for r in results if not r["ok"]]
        latencies = [r["latency_s"] for r in results if r["ok"]]

        malformed = []
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
            malformed.append({"case": what, "status": response.status_code, "reason": response.json().get("reason")})
        client.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()

    bad_4xx = [m for m in malformed if not (400 <= m["status"] < 500 and m["reason"])]
    figures = {
        "pipeline": args.pipeline, "requests": args.requests, "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens, "answered": len(results) - len(errors), "errors": len(errors),
        "unfinished": unfinished, "wall_s": wall, "throughput_rps": (len(latencies) / wall) if wall else None,
        "startup_s": startup_s,
        "latency_s": {**dict(zip(("p50", "p90", "p99"), map(float, np.percentile(latencies, [50, 90, 99])))),
                      "mean": statistics.fmean(latencies),
                      "min": min(latencies), "max": max(latencies)} if latencies else None,
        "malformed": malformed, "malformed_not_4xx": len(bad_4xx),
        "error_samples": errors[:5],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "omp_num_threads": env["OMP_NUM_THREADS"]},
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=2))
    print(f"answered {figures['answered']}/{args.requests}, errors {len(errors)}, unfinished {unfinished}, "
          f"wall {wall:.1f} s, throughput {figures['throughput_rps'] or 0:.3f} req/s")
    if latencies:
        lat = figures["latency_s"]
        print(f"latency s: p50 {lat['p50']:.2f}  p90 {lat['p90']:.2f}  p99 {lat['p99']:.2f}  "
              f"(min {lat['min']:.2f}, max {lat['max']:.2f})")
    for m in malformed:
        print(f"  malformed: {m['case']:<22} -> {m['status']}  {m['reason']}")
    print(f"malformed not answered 4xx with a reason: {len(bad_4xx)}; wrote {args.out}")
    return 0 if not errors and not unfinished and not bad_4xx else 1


if __name__ == "__main__":
    sys.exit(main())
