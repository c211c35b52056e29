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

With ``--backend FILE`` (a served backend, e.g. backends/llama_cpp_server.yaml; ``--backend-url`` points it at
another port) the pipeline's reader is the served model and the load comes from the official ``openai`` client:

1. the pipeline's chat requests are recorded through a forwarding proxy while ``icr2 serve`` answers the questions
   at the backend's own concurrency (its answers are the reference for the loaded runs);
2. the ceiling: a plain httpx client sends those exact requests straight to the LLM server, --concurrency at once;
3. ``icr2 serve PIPELINE --backend FILE`` (no --concurrency: it takes the file's ``max_concurrency``;
   ``--serve-max-queue``, default 64, admits every client) gets the questions from --concurrency ``openai``
   clients released together, once plain and once ``stream=True``: errors, p50/p99 latency, answers/s (and the
   time to the first text when streaming), and answers equal to the reference;
4. the ceiling again at the backend's concurrency (what icr2 serve sends the server) and at --concurrency.

The ratio is answers/s over the best ceiling measured (the load of a shared machine drifts); llama-server's
``/slots`` is sampled every 0.05 s to show how busy each client keeps its slots. Passes when no request failed;
writes bench/results/serve_load-backend.json.

    bash scripts/llama_server.sh start native    # llama-server, ICR2_LLAMA_PARALLEL=4 slots
    .venv/bin/python bench/serve_load.py --backend backends/llama_cpp_server.yaml --requests 50 --concurrency 50

With ``--overhead`` the cost of watching the server: the pipeline served twice at once, one ``icr2 serve`` with API
keys, metrics (scraped every second), tracing (OTLP over HTTP to a local sink that takes the spans) and a JSON
request log on, one with all of them off; --rounds rounds of --requests chat requests from --concurrency ``openai``
clients against each, alternating which goes first. Passes when no request failed and the on/off throughput is at
least --min-ratio (0.95); writes bench/results/serve_load-observability.json.

    .venv/bin/python bench/serve_load.py --overhead --backend backends/llama_cpp_server.yaml --requests 24 \
        --concurrency 4 --rounds 4
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
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


def start_serve(pipeline: str, options: list[str], extra_env: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, float]:
    """``icr2 serve pipeline *options`` on a free loopback port, once its /status answers: (process, url, seconds
    to ready). ``extra_env``: variables for the server (API keys, OTEL_*); ``headers``: sent with the readiness
    poll (the key). The caller stops it (``stop_serve``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(extra_env or {})}
    started = time.perf_counter()
    server = subprocess.Popen([str(Path(sys.executable).parent / "icr2"), "serve", pipeline, "--port", str(port),
                               *options], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited with {server.returncode}: {server.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/status", timeout=2, headers=headers).status_code == 200:
                    return server, url, time.perf_counter() - started
            except httpx.TransportError:
                pass
            if time.perf_counter() - started > 300:
                raise RuntimeError("server not ready in 300 s")
            time.sleep(0.5)
    except BaseException:
        stop_serve(server)
        raise


def stop_serve(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def run_load(args, questions: list[str], max_queue: int, check_malformed: bool) -> dict:
    """Start a server with ``--max-queue max_queue``, send the load (retrying 429s after Retry-After), sample its
    memory; returns the figures of this run."""
    name = Path(args.pipeline).stem
    server, url, startup_s = start_serve(args.pipeline, ["--max-new-tokens", str(args.max_new_tokens),
                                                         "--max-query-chars", str(args.max_query_chars),
                                                         "--max-queue", str(max_queue)])
    malformed: list[dict] = []
    try:
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
        stop_serve(server)

    errors = [r for r in results if not r["ok"]]
    latencies = [r["latency_s"] for r in results if r["ok"]]
    return {
        "max_queue": max_queue, "answered": len(results) - len(errors), "errors": len(errors),
        "unfinished": args.requests - len(results), "busy_answers": sum(r["busy"] for r in results),
        "clients_told_busy": sum(1 for r in results if r["busy"]),
        "other_statuses": sorted({s for r in results for s in r["statuses"]} - {200, 429}),
        "wall_s": wall, "throughput_rps": (len(latencies) / wall) if wall else None, "startup_s": startup_s,
        "latency_s": {**dict(zip(("p50", "p90", "p99"), map(float, np.percentile(latencies, [50, 90, 99])),
                                 strict=True)),
                      "mean": statistics.fmean(latencies), "min": min(latencies), "max": max(latencies)}
        if latencies else None,
        "rss_ready_mib": ready_rss / 2**20, "rss_peak_mib": peak[0] / 2**20,
        "rss_growth_mib": (peak[0] - ready_rss) / 2**20,
        "malformed": malformed, "error_samples": errors[:5],
    }


# ------------------------------------------------------------------------------------- --backend: a served model


def backend_file(args, folder: Path) -> tuple[Path, dict]:
    """The backend file the run uses (``--backend``, its ``api_base_url`` replaced by ``--backend-url`` if given, in
    a copy under ``folder``) and its ``served_model`` mapping."""
    import yaml

    values = yaml.safe_load(Path(args.backend).read_text())
    if values.get("kind") != "served":
        raise SystemExit(f"--backend {args.backend} is kind {values.get('kind')!r}; this mode measures a served one")
    if args.backend_url:
        values["served_model"]["api_base_url"] = args.backend_url
    file = folder / Path(args.backend).name
    file.write_text(yaml.safe_dump(values, sort_keys=False))
    return file, values


class SlotSampler:
    """Polls llama-server's ``/slots`` every 0.05 s: the most slots busy at once and their mean over the phase (how
    busy a client keeps the server). Silent (None) for a server without that endpoint."""

    def __init__(self, root: str) -> None:
        self.url, self.samples, self._stop = f"{root}/slots", [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(0.05):
                try:
                    slots = client.get(self.url).json()
                    self.samples.append(sum(1 for slot in slots if slot.get("is_processing")))
                except (httpx.HTTPError, ValueError, AttributeError, TypeError):
                    return

    def __enter__(self) -> SlotSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict | None:
        return {"peak": max(self.samples), "mean": round(statistics.fmean(self.samples), 2),
                "samples": len(self.samples)} if self.samples else None


def summary(latencies: list[float], wall: float) -> dict:
    return {"answers_per_s": len(latencies) / wall if wall else None, "wall_s": wall,
            "latency_s": {**dict(zip(("p50", "p90", "p99"), map(float, np.percentile(latencies, [50, 90, 99])),
                                     strict=True)),
                          "mean": statistics.fmean(latencies), "max": max(latencies)} if latencies else None}


def ceiling(root: str, bodies: list[bytes], concurrency: int) -> dict:
    """The backend server's own ceiling: a plain httpx client sending ``bodies`` (the chat requests the pipeline
    sends) straight to it, ``concurrency`` in flight. Every request must succeed."""
    latencies: list[float] = []
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=concurrency + 2)) as client, \
            SlotSampler(root) as slots:
        def send(body: bytes) -> None:
            t0 = time.perf_counter()
            client.post(f"{root}/v1/chat/completions", content=body,
                        headers={"Content-Type": "application/json"}).raise_for_status()
            latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(send, bodies))
        wall = time.perf_counter() - start
    return {**summary(latencies, wall), "slots_busy": slots.figures()}


def openai_load(url: str, model: str, questions: list[str], concurrency: int, stream: bool, timeout: float,
                api_key: str = "unused") -> dict:
    """``len(questions)`` chat requests through the official ``openai`` client (its defaults: 2 retries, honouring
    Retry-After), ``concurrency`` threads at once, all released together; per request the answer, latency and (when
    streaming) the time to the first text."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, timeout=timeout)
    go = threading.Barrier(min(concurrency, len(questions)))

    def ask(i: int) -> dict:
        question = questions[i]
        if i < go.parties:
            go.wait()  # the first clients send at the same moment (the others as soon as a thread is free)
        t0 = time.perf_counter()
        first = None
        try:
            messages = [{"role": "user", "content": question}]
            if stream:
                text = ""
                for chunk in client.chat.completions.create(model=model, messages=messages, stream=True):
                    if chunk.choices and chunk.choices[0].delta.content:
                        first = first or time.perf_counter() - t0
                        text += chunk.choices[0].delta.content
            else:
                text = client.chat.completions.create(model=model, messages=messages).choices[0].message.content
            return {"ok": bool(text), "answer": text, "latency_s": time.perf_counter() - t0, "first_text_s": first}
        except Exception as error:  # counted, never dropped
            return {"ok": False, "answer": f"{type(error).__name__}: {error}", "latency_s": time.perf_counter() - t0,
                    "first_text_s": first}

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(ask, range(len(questions))))
    wall = time.perf_counter() - start
    client.close()
    latencies = [r["latency_s"] for r in results if r["ok"]]
    firsts = [r["first_text_s"] for r in results if r["ok"] and r["first_text_s"] is not None]
    return {**summary(latencies, wall), "answered": len(latencies), "errors": len(results) - len(latencies),
            "error_samples": [r["answer"] for r in results if not r["ok"]][:5],
            "first_text_s": (dict(zip(("p50", "p99"), map(float, np.percentile(firsts, [50, 99])), strict=True))
                             if firsts else None),
            "answers": [r["answer"] for r in results]}


def backend_mode(args, questions: list[str]) -> int:
    """The --backend run: record the pipeline's chat requests, the server's ceiling on them, then ``icr2 serve``
    over the backend (its concurrency from the file) under ``--concurrency`` openai clients, plain and streaming,
    then the ceiling again."""
    import tempfile

    from icr2_components.backends import load_backend

    sys.path.insert(0, str(ROOT / "bench"))
    from concurrency import RecordingProxy  # bench/concurrency.py: forwards to the server, keeps the chat bodies

    questions = [questions[i % len(questions)] for i in range(args.requests)]
    name = Path(args.pipeline).stem
    serve_options = ["--max-new-tokens", str(args.max_new_tokens), "--max-queue", str(args.serve_max_queue)]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        file, values = backend_file(args, Path(tmp))
        backend = load_backend(file)
        api = values["served_model"]["api_base_url"].rstrip("/")
        root = api.removesuffix("/v1")
        served_names = [m["id"] for m in httpx.get(f"{api}/models", timeout=10).json()["data"]]
        native = httpx.get(f"{root}/props", timeout=10).status_code == 200
        slots = len(httpx.get(f"{root}/slots", timeout=10).json()) if native else None
        print(f"backend {args.backend} at {api}: {f'llama-server, {slots} slots' if native else 'not llama-server'}"
              f", serves {served_names}; backend max_concurrency {backend.concurrency}", flush=True)

        # 1. the pipeline's own chat requests, recorded through a forwarding proxy at the backend's concurrency (no
        # queue in icr2 serve): the bodies the ceiling sends, and the answers the loaded ones are compared with
        proxy = RecordingProxy(root)
        recorded_file = Path(tmp) / "recording.yaml"
        recorded_file.write_text(file.read_text().replace(api, proxy.url))
        server, url, _ = start_serve(args.pipeline, [*serve_options, "--backend", str(recorded_file)])
        try:
            unloaded = openai_load(url, name, questions, backend.concurrency, False, args.request_timeout)
        finally:
            stop_serve(server)
            proxy.close()
        bodies, reference = proxy.bodies, unloaded.pop("answers")
        if unloaded["errors"] or len(bodies) != len(questions):
            raise RuntimeError(f"recording: {unloaded['errors']} errors {unloaded['error_samples']}, "
                               f"{len(bodies)} chat requests for {len(questions)} questions")
        print(f"recorded {len(bodies)} chat requests ({backend.concurrency} at a time)", flush=True)

        # 2. the ceiling, 3. icr2 serve under the openai clients, 4. the ceiling again (the machine's load drifts),
        # and at icr2 serve's own concurrency (what it sends the server)
        ceilings = []

        def measure_ceiling(concurrency: int) -> None:
            ceilings.append({"concurrency": concurrency, **ceiling(root, bodies, concurrency)})
            print(f"ceiling: {ceilings[-1]['answers_per_s']:.2f} answers/s at concurrency {concurrency}", flush=True)

        measure_ceiling(args.concurrency)
        server, url, startup_s = start_serve(args.pipeline, [*serve_options, "--backend", str(file)])
        runs = {}
        try:
            for mode, stream in (("non-streaming", False), ("streaming", True)):
                with SlotSampler(root) as busy:
                    run = openai_load(url, name, questions, args.concurrency, stream, args.request_timeout)
                run["slots_busy"] = busy.figures()
                run["same_as_unloaded"] = sum(a == b for a, b in zip(run.pop("answers"), reference, strict=True))
                runs[mode] = run
                print(f"icr2 serve, {mode}: {run['answered']}/{len(questions)} answered, {run['errors']} errors, "
                      f"{run['answers_per_s']:.2f} answers/s", flush=True)
        finally:
            stop_serve(server)
        measure_ceiling(backend.concurrency)
        measure_ceiling(args.concurrency)

    # the ratio is over the best ceiling measured (the lowest ratio); the range: over the best and over the worst
    best = max(ceilings, key=lambda c: c["answers_per_s"])
    worst = min(ceilings, key=lambda c: c["answers_per_s"])
    for run in runs.values():
        run["over_ceiling"] = {"answers_per_s": run["answers_per_s"] / best["answers_per_s"],
                               "answers_per_s_range": [run["answers_per_s"] / c["answers_per_s"]
                                                       for c in (best, worst)],
                               "latency_p50": run["latency_s"]["p50"] / best["latency_s"]["p50"]
                               if run["latency_s"] else None}
    load_after = os.getloadavg()
    figures = {
        "mode": "backend", "pipeline": args.pipeline, "backend": args.backend,
        "backend_url": api, "server": f"llama-server, {slots} slots" if native else "other",
        "serve_concurrency_from_backend": backend.concurrency, "serve_max_queue": args.serve_max_queue,
        "requests": len(questions), "clients": args.concurrency, "max_new_tokens": args.max_new_tokens,
        "unloaded_run": unloaded,
        "serve_startup_s": startup_s, "ceiling_runs": ceilings, "ceiling": best, "serve": runs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1"),
                    "load_average_before": [round(x, 1) for x in load_before],
                    "load_average_after": [round(x, 1) for x in load_after]},
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(args.out or ROOT / "bench" / "results" / "serve_load-backend.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"{'client':<34} {'answered':>9} {'errors':>6} {'p50 s':>7} {'p99 s':>7} {'answers/s':>9} {'x ceiling':>9} "
          f"{'slots busy (mean)':>17}")
    rows = [(f"plain httpx -> server, {c['concurrency']} at once", c, None) for c in ceilings]
    rows += [(f"openai -> icr2 serve, {mode}", run, run["over_ceiling"]["answers_per_s"]) for mode, run in runs.items()]
    for label, run, ratio in rows:
        lat, slot = run["latency_s"], run["slots_busy"] or {"mean": float("nan")}
        answered = f"{run.get('answered', len(questions))}/{len(questions)}"
        print(f"{label:<34} {answered:>9} {run.get('errors', 0):>6} {lat['p50']:>7.2f} {lat['p99']:>7.2f} "
              f"{run['answers_per_s']:>9.2f} {'' if ratio is None else f'{ratio:.2f}':>9} {slot['mean']:>17.2f}")
    for mode, run in runs.items():
        print(f"{mode}: answers equal to the unloaded run's {run['same_as_unloaded']}/{len(questions)}"
              + (f"; first text p50 {run['first_text_s']['p50']:.2f} s" if run["first_text_s"] else ""))
    print(f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} cores; wrote {out}")
    return 0 if all(not run["errors"] for run in runs.values()) else 1


class OtlpSink:
    """A local stand-in for an OpenTelemetry collector: an HTTP server that takes OTLP/HTTP posts (the server's
    batch span exporter sends its spans here for real) and counts them."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        sink = self
        self.posts = 0
        self.bytes = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name for it
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.posts += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def overhead_mode(args, questions: list[str]) -> int:
    """The --overhead run: the same pipeline served twice at once, one server with API keys, metrics (scraped
    every second), tracing (exported over OTLP/HTTP to a local sink) and JSON request logs on, one with all of them
    off; the same chat requests from --concurrency openai clients, rounds alternating which server goes first
    (ABBA, so the shared machine's drift falls on both). Passes when no request failed and on/off throughput is at
    least --min-ratio; writes bench/results/serve_load-observability.json."""
    import tempfile

    key = "sk-bench-" + os.urandom(12).hex()
    common = ["--max-new-tokens", str(args.max_new_tokens), "--max-queue", str(args.serve_max_queue)]
    if args.backend:
        common += ["--backend", args.backend]
    sink = OtlpSink()
    folder = Path(tempfile.mkdtemp(prefix="icr2-serve-overhead-"))
    request_log = folder / "requests.jsonl"
    off_server, off_url, off_ready = start_serve(args.pipeline, [*common, "--no-metrics"])
    on_server = None
    scrapes = {"ok": 0, "failed": 0}
    stop = threading.Event()
    try:
        on_server, on_url, on_ready = start_serve(
            args.pipeline, [*common, "--api-keys-env", "ICR2_BENCH_KEYS", "--trace", "--log-requests",
                            str(request_log)],
            extra_env={"ICR2_BENCH_KEYS": key, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url},
            headers={"Authorization": f"Bearer {key}"})
        model = Path(args.pipeline).stem

        def scrape() -> None:  # as Prometheus would, every second
            with httpx.Client(timeout=5, headers={"Authorization": f"Bearer {key}"}) as client:
                while not stop.wait(1.0):
                    try:
                        scrapes["ok" if client.get(f"{on_url}/metrics").status_code == 200 else "failed"] += 1
                    except httpx.TransportError:
                        scrapes["failed"] += 1

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        batch = [questions[i % len(questions)] for i in range(args.requests)]
        openai_load(off_url, model, batch[:2], 2, False, args.request_timeout)  # warm both before measuring
        openai_load(on_url, model, batch[:2], 2, False, args.request_timeout, api_key=key)
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for round_number in range(args.rounds):
            order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
            for mode in order:
                url, api_key = (off_url, "unused") if mode == "off" else (on_url, key)
                run = openai_load(url, model, batch, args.concurrency, False, args.request_timeout, api_key=api_key)
                run.pop("answers")
                runs[mode].append(run)
                print(f"round {round_number + 1} {mode:>3}: {run['answered']}/{len(batch)} answered, "
                      f"{run['answers_per_s']:.2f} answers/s", flush=True)
        stop.set()
        scraper.join(5)
        metrics_text = httpx.get(f"{on_url}/metrics", headers={"Authorization": f"Bearer {key}"}).text
    finally:
        stop.set()
        stop_serve(off_server)
        if on_server is not None:
            stop_serve(on_server)  # SIGTERM: the batch exporter flushes its last spans
        sink.close()

    def throughput(mode: str) -> float:
        answered = sum(run["answered"] for run in runs[mode])
        wall = sum(run["wall_s"] for run in runs[mode])
        return answered / wall if wall else 0.0

    counted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
                  if line.startswith("icr2_serve_requests_total{") and 'route="/v1/chat/completions"' in line
                  and 'status="200"' in line)
    logged = len(request_log.read_text().splitlines()) if request_log.exists() else 0
    errors = sum(run["errors"] for mode in runs for run in runs[mode])
    ratio = throughput("on") / throughput("off") if throughput("off") else None
    figures = {
        "pipeline": args.pipeline, "backend": args.backend, "requests_per_phase": args.requests,
        "concurrency": args.concurrency, "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
        "off": {"answers_per_s": throughput("off"), "runs": runs["off"], "ready_s": off_ready},
        "on": {"answers_per_s": throughput("on"), "runs": runs["on"], "ready_s": on_ready,
               "features": ["api keys (env)", "metrics (scraped every 1 s)", "tracing (OTLP/HTTP to a local sink)",
                            "JSON request log"],
               "metrics_scrapes": scrapes, "chat_requests_counted": counted, "request_log_lines": logged,
               "otlp_posts": sink.posts, "otlp_bytes": sink.bytes},
        "throughput_on_over_off": ratio,
        "per_round_ratio": [on["answers_per_s"] / off["answers_per_s"] for on, off in
                            zip(runs["on"], runs["off"], strict=True) if off["answers_per_s"]],
        "errors": errors,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_at_end": [round(x, 1) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(args.out or ROOT / "bench" / "results" / "serve_load-observability.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"off: {throughput('off'):.3f} answers/s; on (keys, metrics, tracing, logs): {throughput('on'):.3f} "
          f"answers/s; on/off {ratio:.3f} (per round {[round(r, 3) for r in figures['per_round_ratio']]}); "
          f"errors {errors}; metrics counted {counted:g} chat answers, {logged} log lines, {sink.posts} OTLP posts; "
          f"wrote {out}")
    ok = errors == 0 and ratio is not None and ratio >= args.min_ratio and sink.posts > 0 and counted > 0
    return 0 if ok else 1


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
    parser.add_argument("--backend", help="served backend file, e.g. backends/llama_cpp_server.yaml: measure its "
                        "server's ceiling, then icr2 serve over it under --concurrency openai clients (plain, "
                        "streaming)")
    parser.add_argument("--backend-url", help="the backend's api_base_url instead of the file's, e.g. "
                        "http://127.0.0.1:8095/v1")
    parser.add_argument("--serve-max-queue", type=int, default=64,
                        help="--backend: icr2 serve's --max-queue (default 64: every client admitted at once)")
    parser.add_argument("--overhead", action="store_true",
                        help="measure throughput with API keys, metrics, tracing and request logs on against all off, "
                        "two servers in the same run (with --backend: over the served model)")
    parser.add_argument("--rounds", type=int, default=4, help="--overhead: load rounds per server (default 4)")
    parser.add_argument("--min-ratio", type=float, default=0.95,
                        help="--overhead: the least on/off throughput that passes (default 0.95)")
    parser.add_argument("--out", help="results JSON (default bench/results/serve_load.json, serve_load-backend.json "
                        "with --backend)")
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1 or args.max_queue < 0:
        parser.error("--requests and --concurrency must be >= 1, --max-queue >= 0")

    from icr2_components.kilt import build_sample
    from icr2_components.kilt.tasks import read_kilt_tasks

    questions = [t.input for t in read_kilt_tasks(build_sample().tasks) if t.input.strip()]
    if args.overhead:
        return overhead_mode(args, questions)
    if args.backend:
        return backend_mode(args, questions)
    args.out = args.out or str(ROOT / "bench" / "results" / "serve_load.json")
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
