"""Batched answering on CPU: LocalChatReader.run_batch (one left-padded generate call for B prompts) against one
prompt at a time (B = 1), in fp32 and bf16, with answers/s, peak memory and answer agreement.

Real prompts: NQ-sample questions, each an ICR2 QA corpus-in-context prompt over its top-3 BM25 passages from the
bundled sample index (vanilla RAG's prompt), SmolLM2-135M-Instruct, greedy, 16 new tokens. Every (dtype, B) runs in
a fresh process (peak RSS is per process), with the same prompts in the same order; the baseline is B = 1 of the
same dtype in the same run. Agreement: batched replies against B = 1 (exact text; greedy should give the same), and
bf16 against fp32 (exact text and the official answer-match score of both against the gold answers).

    .venv/bin/python bench/reader_batching.py --questions 32 --batch-sizes 1 4 8 16 --threads 1

Writes bench/results/reader_batching.json.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
MODEL = "smollm2-135m-instruct"


def build_prompts(questions: int) -> list[dict]:
    """The prompts as JSON-able records: question, gold answers and the user message."""
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.tasks import read_kilt_tasks
    from icr2_components.stores import open_index
    from icr2_components.text.templates import render_cic_prompt

    index = open_index(ROOT / "indexing" / "kilt-sample.yaml")
    records = []
    for task in read_kilt_tasks(build_sample().tasks, limit=questions):
        passages = index.retrieve(task.input, method="bm25", top_k=3)
        records.append(
            {
                "question": task.input,
                "answers": task.answers,
                "prompt": render_cic_prompt("qa", task.input, passages).text,
            }
        )
    return records


def worker(args) -> int:
    """One (dtype, batch size) in this process: load, warm up, answer every prompt, print JSON."""
    import torch
    from haystack.dataclasses import ChatMessage

    from icr2_components.readers.local_chat_reader import LocalChatReader

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts).read_text())
    conversations = [[ChatMessage.from_user(p["prompt"])] for p in prompts]
    reader = LocalChatReader(model=MODEL, max_new_tokens=args.max_new_tokens, dtype=args.dtype, device="cpu")
    reader.warm_up()
    reader.run_batch(conversations[: args.batch_size])  # warm-up: first-call allocations and kernel selection
    loaded_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    replies = []
    start = time.perf_counter()
    for begin in range(0, len(conversations), args.batch_size):
        chunk = conversations[begin : begin + args.batch_size]
        if args.batch_size == 1:
            replies.append(reader.run(messages=chunk[0])["replies"][0])
        else:
            replies.extend(reader.run_batch(chunk))
    seconds = time.perf_counter() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "dtype": args.dtype,
                "batch_size": args.batch_size,
                "seconds": seconds,
                "answers_per_s": len(conversations) / seconds,
                "generated_tokens": sum(r.meta["completion_tokens"] for r in replies),
                "peak_rss_mib": peak_rss / 1024,
                "peak_rss_after_warmup_mib": loaded_rss / 1024,
                "answers": [r.text for r in replies],
            }
        )
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of each worker")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from rich.console import Console
    from rich.table import Table

    from icr2_components.evaluation.metrics.answer_match import answer_match

    if 1 not in args.batch_sizes:
        parser.error("--batch-sizes must include 1: the baseline")
    load_start = os.getloadavg()[0]
    RESULTS.mkdir(parents=True, exist_ok=True)
    prompts = build_prompts(args.questions)
    # the prompts hold sample passages (../shared/data): handed to the workers from runs/, never committed
    prompts_file = ROOT / "runs" / "reader_batching_prompts.json"
    prompts_file.parent.mkdir(parents=True, exist_ok=True)
    prompts_file.write_text(json.dumps(prompts))
    runs = {}
    for dtype in args.dtypes:
        for size in sorted(args.batch_sizes):
            command = [
                sys.executable,
                __file__,
                "--worker",
                "--dtype",
                dtype,
                "--batch-size",
                str(size),
                "--prompts",
                str(prompts_file),
                "--threads",
                str(args.threads),
                "--max-new-tokens",
                str(args.max_new_tokens),
            ]
            print(f"{dtype}, batch {size} ...", flush=True)
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[(dtype, size)] = json.loads(output.strip().splitlines()[-1])

    def matches(answer: str, gold: list[str]) -> bool:
        return answer_match(answer, gold)  # the official score (best_subspan_em, SQuAD/KILT normalisation)

    rows = []
    for (dtype, size), run in runs.items():
        base = runs[(dtype, 1)]
        same = sum(a == b for a, b in zip(run["answers"], base["answers"], strict=True))
        rows.append(
            {
                "dtype": dtype,
                "batch_size": size,
                "answers_per_s": run["answers_per_s"],
                "speedup": run["answers_per_s"] / base["answers_per_s"],
                "peak_rss_mib": run["peak_rss_mib"],
                "peak_rss_ratio": run["peak_rss_mib"] / base["peak_rss_mib"],
                "same_as_batch_1": same,
                "answer_match": sum(matches(a, p["answers"]) for a, p in zip(run["answers"], prompts, strict=True)),
            }
        )
    table = Table(
        title=f"LocalChatReader on CPU, {len(prompts)} vanilla-RAG prompts (top-3 BM25), "
        f"{args.max_new_tokens} new tokens, {args.threads} thread(s)"
    )
    for column in (
        "dtype",
        "batch",
        "answers/s",
        "x batch 1",
        "peak RSS MiB",
        "x batch 1",
        "same as batch 1",
        "answer match",
    ):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["dtype"],
            str(row["batch_size"]),
            f"{row['answers_per_s']:.2f}",
            f"{row['speedup']:.2f}x",
            f"{row['peak_rss_mib']:.0f}",
            f"{row['peak_rss_ratio']:.2f}x",
            f"{row['same_as_batch_1']}/{len(prompts)}",
            f"{row['answer_match']}/{len(prompts)}",
        )
    console = Console(width=160)
    console.print(table)
    agreement = None
    if "float32" in args.dtypes and "bfloat16" in args.dtypes:
        fp32, bf16 = runs[("float32", 1)]["answers"], runs[("bfloat16", 1)]["answers"]
        agreement = {
            "same_text": sum(a == b for a, b in zip(fp32, bf16, strict=True)),
            "same_answer_match": sum(
                matches(a, p["answers"]) == matches(b, p["answers"])
                for a, b, p in zip(fp32, bf16, prompts, strict=True)
            ),
            "questions": len(prompts),
            "bf16_vs_fp32_speed_batch_1": runs[("bfloat16", 1)]["answers_per_s"]
            / runs[("float32", 1)]["answers_per_s"],
        }
        console.print(
            f"bf16 vs fp32 (batch 1): same text {agreement['same_text']}/{len(prompts)}, same answer-match "
            f"verdict {agreement['same_answer_match']}/{len(prompts)}, "
            f"speed {agreement['bf16_vs_fp32_speed_batch_1']:.2f}x"
        )
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    console.print(f"machine: {machine}")
    (RESULTS / "reader_batching.json").write_text(
        json.dumps(
            {
                "machine": machine,
                "threads": args.threads,
                "max_new_tokens": args.max_new_tokens,
                "rows": rows,
                "bf16_vs_fp32": agreement,
            },
            indent=2,
        )
    )
    print(f"wrote {RESULTS / 'reader_batching.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
