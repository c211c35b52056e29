"""How fast a llama.cpp server answers while another process keeps one core busy, at 1 and at 2 server threads.

Under the README's two pytest workers, the llama.cpp server's tests run on one worker while the other runs torch on
one thread: with the server on 2 threads that is 3 busy threads on 2 cores. llama.cpp's CPU threads meet at a
barrier after every operation, so a thread the kernel has set aside holds up the other. This bench times the same
chat requests (a short prompt, ``--tokens`` generated, no prompt cache) to each server given with ``--server
NAME=URL`` (started beforehand with ``ICR2_LLAMA_THREADS`` set), first on otherwise idle cores (the baseline, in the
same run) and then beside a one-thread torch process doing matrix products, and prints each median and its ratio
to the idle baseline.

    ICR2_LLAMA_PORT=8091 ICR2_LLAMA_THREADS=2 bash scripts/llama_server.sh start native
    ICR2_LLAMA_PORT=8092 ICR2_LLAMA_THREADS=1 bash scripts/llama_server.sh start native
    .venv/bin/python bench/llama_threads_beside_a_worker.py \\
        --server threads2=http://127.0.0.1:8091/v1 --server threads1=http://127.0.0.1:8092/v1

``--prompt-words N`` puts N words before the question, to time prompt processing (``ICR2_LLAMA_THREADS_BATCH``
sets its threads apart from generation's). Writes ``--out`` (default
``bench/results/llama_threads_beside_a_worker.json``, with the machine's load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
BUSY = """
import torch
torch.set_num_threads(1)
a = torch.randn(512, 512)
while True:
    a = torch.tanh(a @ a)
"""


def time_requests(url: str, model: str, tokens: int, repeats: int, prompt_words: int) -> list[float]:
    # a long prompt (--prompt-words) times prompt processing, a short one generation
    words = " ".join(f"word{i % 997}" for i in range(prompt_words))
    seconds = []
    with httpx.Client(timeout=600) as client:
        for repeat in range(-1, repeats):  # -1: the first request's set-up, not timed
            # a new first word each time: llama-cpp-python's server reuses a prompt's common prefix whatever
            # cache_prompt says, so the same prompt twice would not be processed again
            content = f"Request {uuid.uuid4().hex}. {words} Describe the city of Paris in detail."
            body = {"model": model, "max_tokens": tokens, "temperature": 0,
                    "messages": [{"role": "user", "content": content}], "cache_prompt": False, "ignore_eos": True}
            if repeat < 0:
                client.post(f"{url}/chat/completions", json=body).raise_for_status()
                continue
            start = time.perf_counter()
            reply = client.post(f"{url}/chat/completions", json=body)
            reply.raise_for_status()
            seconds.append(time.perf_counter() - start)
            assert reply.json()["usage"]["completion_tokens"] == tokens
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True, help="NAME=URL of a running server")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-words", type=int, default=0, help="words before the question (prompt processing)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "llama_threads_beside_a_worker.json")
    args = parser.parse_args()
    servers = dict(item.split("=", 1) for item in args.server)

    rows = {}
    for name, url in servers.items():
        idle = time_requests(url, args.model, args.tokens, args.repeats, args.prompt_words)
        busy_process = subprocess.Popen([sys.executable, "-c", BUSY], env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            time.sleep(2)  # the busy process running
            beside = time_requests(url, args.model, args.tokens, args.repeats, args.prompt_words)
        finally:
            busy_process.kill()
            busy_process.wait()
        rows[name] = {"idle_s": idle, "beside_one_busy_thread_s": beside,
                      "ratio": statistics.median(beside) / statistics.median(idle)}
        print(f"{name}: {args.prompt_words} prompt words, {args.tokens} tokens, median idle "
              f"{statistics.median(idle):.2f} s, beside one busy thread "
              f"{statistics.median(beside):.2f} s: {rows[name]['ratio']:.2f}x its idle baseline")
    args.out.write_text(json.dumps({"servers": servers, "tokens": args.tokens, "prompt_words": args.prompt_words,
                                    "repeats": args.repeats,
                                    "rows": rows, "load_average": os.getloadavg()}, indent=2))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
