"""CUB's matrix on the bundled NQ sample with SmolLM2: techniques x {gold, conflicting, irrelevant}, BCU,
faithfulness (avg of gold and conflicting) and robustness (irrelevant), a Pareto plot; and the per-generated-token
cost of each decoding technique against plain decoding, in the same run.

    .venv/bin/python bench/cmt_matrix.py --questions 24 --max-new-tokens 32 --skip-cost   # the matrix
    .venv/bin/python bench/cmt_matrix.py --cost-questions 4 --cost-rounds 2 --skip-matrix  # the cost (quiet machine)

Writes bench/results/cmt_matrix.json with cmt_matrix.png, and cmt_cost.json. Settings are the YAMLs' defaults
(not tuned here: tuning is `icr2 compare --tune`). PH3 uses bench/results/ph3_heads_smollm2.json, probed on the
first 16 NQ sample questions; the matrix questions start after them (``--offset 16``).
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

TECHNIQUES = {
    "regular": "pipelines/vanilla_rag.yaml",
    "cad": "pipelines/cmt_cad.yaml",
    "acd": "pipelines/cmt_acd.yaml",
    "coiecd": "pipelines/cmt_coiecd.yaml",
    "ph3_context": "pipelines/cmt_ph3_context.yaml",
    "ph3_memory": "pipelines/cmt_ph3_memory.yaml",
    "multi_agent": "pipelines/cmt_multi_agent.yaml",
    "prompting": "pipelines/cmt_prompting.yaml",
}
TYPES = ("gold", "conflicting", "irrelevant")


def matrix(questions, contexts, max_new_tokens, only):
    from icr2_components.evaluation.compare.tuning import score_answer
    from icr2_components.pipeline_spec import PipelineSpec

    rows = {}
    for name, path in TECHNIQUES.items():
        if only and name not in only:
            continue
        spec = PipelineSpec.from_file(path)
        scores = {t: [] for t in TYPES}
        answers = []
        start = time.perf_counter()
        for question in questions:
            for context_type in TYPES:
                documents = contexts[question.id].documents(context_type)
                if documents is None:
                    continue
                answer = spec.run(question.query, documents, controlled=True, max_new_tokens=max_new_tokens)["answer"]
                scores[context_type].append(score_answer(answer, context_type, question.answers,
                                                         contexts[question.id].conflicting_answer))
                answers.append({"question": question.id, "context_type": context_type, "answer": answer})
        bcu = {t: (sum(v) / len(v) if v else None) for t, v in scores.items()}
        rows[name] = {"bcu": bcu, "n": {t: len(v) for t, v in scores.items()},
                      "faithfulness": (bcu["gold"] + bcu["conflicting"]) / 2, "robustness": bcu["irrelevant"],
                      "seconds": round(time.perf_counter() - start, 1), "answers": answers}
        print(
            f"{name:12s} gold {bcu['gold']:.2f} conflicting {bcu['conflicting']:.2f} irrelevant "
            f"{bcu['irrelevant']:.2f} "
            f"({rows[name]['seconds']} s)",
            flush=True,
        )
    return rows


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


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.evaluation.metrics.bcu import pareto_front

    points = {n: (r["robustness"], r["faithfulness"]) for n, r in rows.items()}
    front = set(pareto_front(points))
    figure, axis = plt.subplots(figsize=(6, 5))
    for name, (x, y) in points.items():
        axis.scatter(x, y, color="crimson" if name in front else "grey", s=40)
        axis.annotate(name, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ordered = sorted((points[n] for n in front))
    axis.plot([p[0] for p in ordered], [p[1] for p in ordered], color="crimson", linewidth=1)
    axis.set_xlabel("robustness (BCU irrelevant)")
    axis.set_ylabel("faithfulness (avg BCU gold, conflicting)")
    axis.set_xlim(-0.05, 1.05)
    axis.set_ylim(-0.05, 1.05)
    axis.set_title("CMTs on NQ sample, SmolLM2-135M-Instruct (Pareto front in red)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return sorted(front)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--cost-questions", type=int, default=3)
    parser.add_argument("--cost-rounds", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--cost-tokens", type=int, default=16)
    parser.add_argument("--only", nargs="*", help="a subset of techniques")
    parser.add_argument("--skip-matrix", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--offset", type=int, default=16, help="skip the first questions (PH3's probing set)")
    args = parser.parse_args()

    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions

    count = max(args.questions, args.cost_questions)
    questions, skips, path = read_compare_questions(None, limit=args.offset + count)
    questions = questions[args.offset:]
    pool = answer_pool(path)
    contexts = {
        q.id: build_context_set(q.id, q.answers, q.gold_documents, q.irrelevant_candidates, pool) for q in questions
    }
    started = time.strftime("%Y-%m-%d %H:%M")
    result = {"date": started, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                                           "note": "2-core CPU, 24 GB, no GPU, shared with other jobs (loaded)"},
              "model": "smollm2-135m-instruct (float32, cpu)", "dataset": path, "questions": args.questions,
              "max_new_tokens": args.max_new_tokens,
              "question_offset": args.offset,
              "ph3_artifact_note": "probed on the first 16 NQ sample questions"}
    out = ROOT / "bench" / "results"
    if not args.skip_matrix:
        rows = matrix(questions[:args.questions], contexts, args.max_new_tokens, args.only)
        result["matrix"] = rows
        result["pareto_front"] = plot(rows, out / "cmt_matrix.png")
        print("Pareto front:", result["pareto_front"])
        (out / "cmt_matrix.json").write_text(json.dumps(result, indent=1))
        print(f"wrote {out / 'cmt_matrix.json'}")
    if not args.skip_cost:
        result.pop("matrix", None)
        result["cost"] = cost(questions[:args.cost_questions], contexts, args.cost_tokens, args.cost_rounds)
        result["cost"]["target"] = "ACD/CAD at most 2.2x plain decoding per generated token"
        (out / "cmt_cost.json").write_text(json.dumps(result, indent=1))
        print(f"wrote {out / 'cmt_cost.json'}")


if __name__ == "__main__":
    main()
