"""CUB's matrix and the per-generated-token cost of each decoding technique against plain decoding.

The matrix (techniques x {gold, conflicting, irrelevant}, BCU, faithfulness and robustness with 95% intervals, the
Pareto plot, each technique paired against regular decoding) is the registered experiment ``icr2 reproduce cub``
(icr2_components/evaluation/experiments/cub.py: the held-out NQ questions, compare's answer cache and statistics,
the paper's Table 3 beside); this script's matrix part only calls it. The cost part is a timing bench and stays
here.

    .venv/bin/python bench/cmt_matrix.py --questions 24 --skip-cost   # = icr2 reproduce cub --limit 24
    .venv/bin/python bench/cmt_matrix.py --cost-questions 4 --cost-rounds 2 --skip-matrix  # the cost (quiet machine)

The matrix writes its report under --out (default runs/reproduce/cub); the cost writes bench/results/cmt_cost.json.
bench/results/cmt_matrix.json and cmt_matrix.png are an earlier run of the matrix by this script (20 questions
after PH3's 16 probing ones, no intervals), kept as docs/benchmarks/rap-and-heads.md cites them. PH3 uses the shipped
ph3_heads_smollm2 artifact, probed on the first 16 NQ sample questions; the cost questions start after them
(``--offset 16``).
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)


def cost(questions, contexts, max_new_tokens, rounds):
    """Seconds per generated token (prefill included) of each decoding technique and of plain decoding."""
    from haystack.dataclasses import ChatMessage

    from icr2_components.readers import ContextAwareDecodingReader, LocalChatReader
    from icr2_components.text.templates import render_cic_prompt

    common = dict(model="smollm2-135m-instruct", max_new_tokens=max_new_tokens, dtype="float32", device="cpu")
    readers = {"plain": LocalChatReader(**common),
               "cad": ContextAwareDecodingReader(technique="cad", alpha=0.5, **common),
               "cad_batched": ContextAwareDecodingReader(technique="cad", alpha=0.5, passes="batched", **common),
               "acd": ContextAwareDecodingReader(technique="acd", alpha=1.0, **common),
               "coiecd": ContextAwareDecodingReader(technique="coiecd", alpha=1.0, **common)}
    totals = {name: [0.0, 0] for name in readers}
    names = list(readers)
    for round_index in range(rounds):
        for question in questions:
            documents = contexts[question.id].documents("gold")
            if documents is None:
                continue
            messages = render_cic_prompt("qa", question.query, documents).messages
            memory = [
                ChatMessage.from_user(f"Please answer the following question:\n\nQuestion: {question.query}\nAnswer:")
            ]
            order = names[round_index % len(names):] + names[:round_index % len(names)]  # rotate against load drift
            for name in order:
                kwargs = {} if name == "plain" else {"memory_messages": memory}
                reply = readers[name].run(messages=messages, **kwargs)["replies"][0]
                totals[name][0] += reply.meta["latency_s"]
                totals[name][1] += reply.meta["completion_tokens"]
    per_token = {name: seconds / max(tokens, 1) for name, (seconds, tokens) in totals.items()}
    ratios = {name: per_token[name] / per_token["plain"] for name in per_token}
    for name in names:
        print(
            f"cost {name:12s} {per_token[name] * 1000:.1f} ms/token ({totals[name][1]} tokens)  ratio vs plain "
            f"{ratios[name]:.2f}x",
            flush=True,
        )
    return {"seconds_per_token": per_token, "tokens": {n: t[1] for n, t in totals.items()}, "ratio_vs_plain": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=3, help="the matrix's questions (icr2 reproduce cub --limit)")
    parser.add_argument("--cost-questions", type=int, default=3)
    parser.add_argument("--cost-rounds", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="the matrix's answer budget (default: the preset's registered one)")
    parser.add_argument("--cost-tokens", type=int, default=16)
    parser.add_argument("--only", nargs="*", help="a subset of techniques (icr2 reproduce cub --set techniques=...)")
    parser.add_argument("--out", default="runs/reproduce/cub", help="the matrix's report and answer cache")
    parser.add_argument("--skip-matrix", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--offset", type=int, default=16, help="skip the first questions (PH3's probing set)")
    args = parser.parse_args()

    if not args.skip_matrix:
        from icr2_components.evaluation.experiments.runner import run_experiment

        report = run_experiment("cub", limit=args.questions, out_dir=args.out, max_new_tokens=args.max_new_tokens,
                                options={"techniques": ",".join(args.only)} if args.only else None)
        print("Pareto front:", report["pareto_front"])
        print(f"wrote {report['files']['html']}")
    if args.skip_cost:
        return

    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions

    questions, _skips, path = read_compare_questions(None, limit=args.offset + args.cost_questions)
    questions = questions[args.offset:]
    pool = answer_pool(path)
    contexts = {
        q.id: build_context_set(q.id, q.answers, q.gold_documents, q.irrelevant_candidates, pool) for q in questions
    }
    result = {"date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                          "note": "2-core CPU, 24 GB, no GPU, shared with other jobs (loaded)"},
              "model": "smollm2-135m-instruct (float32, cpu)", "dataset": path, "question_offset": args.offset}
    result["cost"] = cost(questions[:args.cost_questions], contexts, args.cost_tokens, args.cost_rounds)
    result["cost"]["target"] = "ACD/CAD at most 2.2x plain decoding per generated token"
    out = ROOT / "bench" / "results" / "cmt_cost.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
