"""``icr2 compare``'s answers/s at each concurrency against the LLM server's own ceiling on the same prompts.

The ceiling is a plain concurrent client (``httpx`` in a thread pool, nothing else) sending exactly the chat
requests compare sends (recorded once through a forwarding proxy, in a first compare run at concurrency 1), at
concurrency 1, 2, 4, 8, 16; compare then answers the same questions at each concurrency (a fresh answer cache
each time, so every answer is a model run), and the ratio is compare's answers/s over the ceiling's at that
concurrency. Compare pays what the plain client does not: building each prompt, counting its tokens with the
server's tokenize endpoint before sending, and writing the cache in order.

    bash scripts/llama_server.sh start native      # llama-server, 4 slots (ICR2_LLAMA_PARALLEL)
    .venv/bin/python bench/concurrency.py --levels 1,2,4,8,16 --limit 12
    bash scripts/llama_server.sh start python      # the one-at-a-time server, for contrast

Prints a table and writes ``bench/results/concurrency-<server>.json`` (with the machine's load average).
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from icr2_components.testing import ForwardingProxy

REPO = Path(__file__).resolve().parents[1]


class RecordingProxy(ForwardingProxy):
    """Forwards every request to the server and keeps the bodies of the chat completions, in arrival order."""

    def __init__(self, target_root: str) -> None:
        self.bodies: list[bytes] = []
        super().__init__(target_root, timeout_s=600)

    def exchange(self, method, path, body, forward):
        if self.is_chat(method, path):
            self.bodies.append(body)
        return forward()


def backend_for(url: str, folder: Path):
    from icr2_components.backends import load_backend

    file = folder / f"backend-{url.rsplit(':', 1)[-1].replace('/', '_')}.yaml"
    file.write_text((REPO / "backends" / "llama_cpp_server.yaml").read_text().replace("http://127.0.0.1:8089/v1", url))
    return load_backend(file)


def ceiling(url: str, bodies: list[bytes], concurrency: int) -> float:
    """Answers/s of a plain client sending ``bodies`` with ``concurrency`` requests in flight."""
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=concurrency + 2)) as client:
        def send(body: bytes) -> None:
            response = client.post(url.rstrip("/") + "/chat/completions", content=body,
                                   headers={"Content-Type": "application/json"})
            response.raise_for_status()

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(send, bodies))
        return len(bodies) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8089/v1")
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--limit", type=int, default=12, help="questions (each answered under every context type)")
    parser.add_argument("--pipelines", nargs="+", default=["pipelines/oracle.yaml", "pipelines/vanilla_rag.yaml"])
    parser.add_argument("--context-types", default="open,gold,conflicting,irrelevant")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--server", default=None, help="label of the server in the results (default: from /props)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    from icr2_components.evaluation.compare.run import run_compare

    levels = [int(x) for x in args.levels.split(",")]
    root = args.url.rstrip("/").removesuffix("/v1")
    server = args.server or ("native" if httpx.get(root + "/props", timeout=10).status_code == 200 else "python")
    settings = {"limit": args.limit, "max_new_tokens": args.max_new_tokens, "context_types": args.context_types,
                "progress": False}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proxy = RecordingProxy(root)
        try:  # records compare's requests; also warms the pipelines, the index and the server
            run_compare(args.pipelines, out_dir=folder / "record", backend=backend_for(proxy.url, folder),
                        concurrency=1, **settings)
        finally:
            proxy.close()
        bodies = proxy.bodies
        backend = backend_for(args.url, folder)
        rows = []
        for level in levels:
            plain = ceiling(args.url, bodies, level)
            report = run_compare(args.pipelines, out_dir=folder / f"c{level}", backend=backend, concurrency=level,
                                 **settings)
            ours = report["run"]["answers_per_second"]
            assert report["run"]["counters"]["model_runs"] == len(bodies), "compare answered other requests"
            rows.append({"concurrency": level, "ceiling_answers_per_s": round(plain, 3),
                         "compare_answers_per_s": ours, "ratio": round(ours / plain, 3)})
            print(f"concurrency {level:>2}: ceiling {plain:6.2f} answers/s, compare {ours:6.2f} answers/s, "
                  f"ratio {ours / plain:.2f}", flush=True)
    best_ceiling = max(rows, key=lambda r: r["ceiling_answers_per_s"])
    best_compare = max(rows, key=lambda r: r["compare_answers_per_s"])
    result = {"server": server, "url": args.url, "requests_per_level": len(bodies), "pipelines": args.pipelines,
              "context_types": args.context_types, "max_new_tokens": args.max_new_tokens, "rows": rows,
              "best_compare_over_best_ceiling": round(best_compare["compare_answers_per_s"]
                                                      / best_ceiling["ceiling_answers_per_s"], 3),
              "speedup_of_compare_over_concurrency_1": round(best_compare["compare_answers_per_s"]
                                                             / rows[0]["compare_answers_per_s"], 3),
              "cores": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg()}
    print(
        f"{len(bodies)} requests per level on the {server} server; best compare {best_compare['compare_answers_per_s']}"
        f" answers/s (concurrency {best_compare['concurrency']}) = {result['best_compare_over_best_ceiling']:.2f}x "
        f"the best ceiling {best_ceiling['ceiling_answers_per_s']} (concurrency {best_ceiling['concurrency']}); "
        f"{result['speedup_of_compare_over_concurrency_1']:.2f}x compare at concurrency 1; load "
        f"{load_before[0]:.1f} -> {result['load_average_after'][0]:.1f} on {os.cpu_count()} cores"
    )
    out = Path(args.out or REPO / "bench" / "results" / f"concurrency-{server}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
