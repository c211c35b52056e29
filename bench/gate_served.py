"""The gate over an OpenAI-compatible server against the same gate on the local model: does P(yes) from a server's
top log-probabilities follow P(yes) from the local logits?

    bash scripts/llama_server.sh start          # llama.cpp's server, SmolLM2-135M-Instruct Q4_1 GGUF, port 8089
    .venv/bin/python bench/gate_served.py [--server http://127.0.0.1:8089/v1] [--methods ta_are vanilla]

For each question of bench/data/gate_eval.jsonl (RetrievalQA-style, 53 questions) and each method, the local gate
(SmolLM2-135M-Instruct fp32 safetensors, next-token logits after the "[" answer prefix) and the served gate
(the Q4_1 GGUF behind llama.cpp, `top_logprobs` of the first answer position: a chat API cannot open the answer
with "[") score the same prompt. Reports Pearson and Spearman correlation of the two P(yes), agreement of the
decisions at 0.5 and at each side's median, the AUROC of each against the labels, the served answer mass (the
yes+no share of the first position) and the fallbacks to a parsed reply.

Writes bench/results/gate_served.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from icr2_components import apply_environment_defaults  # noqa: E402

apply_environment_defaults()

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tqdm import tqdm  # noqa: E402

from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl  # noqa: E402
from icr2_components.evaluation.gates.retrieval_decisions import retrieval_auroc  # noqa: E402
from icr2_components.gates import TimeAwareRetrievalGate  # noqa: E402

DATA = ROOT / "bench" / "data" / "gate_eval.jsonl"
RESULTS = ROOT / "bench" / "results"


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share their mean rank), for Spearman's correlation."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2
        start = end + 1
    return result


def compare(records, method: str, server: dict, today: str) -> dict:
    local = TimeAwareRetrievalGate(method=method, today=today, model_settings={"dtype": "float32", "device": "cpu"})
    served = TimeAwareRetrievalGate(method=method, model=None, today=today, server=server)
    local.warm_up()
    served.warm_up()
    rows = []
    start = time.perf_counter()
    for record in tqdm(records, desc=method, unit="q"):
        by_logits = local.run(query=record.question)["decision"]
        by_server = served.run(query=record.question)["decision"]
        assert by_logits["prompt"] == by_server["prompt"]
        rows.append({"question": record.question, "needs_retrieval": record.needs_retrieval,
                     "local_p_yes": by_logits["p_yes"], "served_p_yes": by_server["p_yes"],
                     "served_scoring": by_server["scoring"], "served_answer_mass": by_server["answer_mass"],
                     "served_reply": by_server["reply"]})
    scored = [r for r in rows if r["served_scoring"] == "top_logprobs"]
    xs = [r["local_p_yes"] for r in scored]
    ys = [r["served_p_yes"] for r in scored]
    x_median, y_median = statistics.median(xs), statistics.median(ys)
    labels = [r["needs_retrieval"] for r in scored]
    masses = [r["served_answer_mass"] for r in scored]
    return {
        "questions": len(rows), "scored_by_top_logprobs": len(scored), "stats": served.stats,
        "pearson": statistics.correlation(xs, ys), "spearman": statistics.correlation(ranks(xs), ranks(ys)),
        "decision_agreement_at_0.5": sum((x >= 0.5) == (y >= 0.5) for x, y in zip(xs, ys, strict=True)) / len(xs),
        "decision_agreement_at_medians": sum(
            (x >= x_median) == (y >= y_median) for x, y in zip(xs, ys, strict=True)
        ) / len(xs),
        "mean_abs_difference": statistics.mean(abs(x - y) for x, y in zip(xs, ys, strict=True)),
        "local_median": x_median, "served_median": y_median,
        "local_auroc": retrieval_auroc(xs, labels), "served_auroc": retrieval_auroc(ys, labels),
        "served_answer_mass": {"min": min(masses), "mean": statistics.mean(masses), "max": max(masses)},
        "seconds": time.perf_counter() - start, "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--server", default="http://127.0.0.1:8089/v1")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the served model's name")
    parser.add_argument("--today", default="2025-06-01")
    parser.add_argument("--methods", nargs="+", default=["ta_are", "vanilla"])
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)
    records, skips = read_retrievalqa_jsonl(args.data)
    console.print(skips.summary())
    server = {"api_base_url": args.server, "model": args.model, "timeout_s": 120, "max_retries": 2}
    results = {method: compare(records, method, server, args.today) for method in args.methods}
    table = Table(title=f"served (top_logprobs) vs local (logits) P(yes), {args.model}, {len(records)} questions")
    for column in ("method", "pearson", "spearman", "agree @0.5", "agree @medians", "mean |diff|", "AUROC local",
                   "AUROC served", "answer mass (mean)", "fallbacks"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for method, r in results.items():
        table.add_row(method, f"{r['pearson']:.3f}", f"{r['spearman']:.3f}", f"{r['decision_agreement_at_0.5']:.2f}",
                      f"{r['decision_agreement_at_medians']:.2f}", f"{r['mean_abs_difference']:.3f}",
                      f"{r['local_auroc']:.3f}", f"{r['served_auroc']:.3f}", f"{r['served_answer_mass']['mean']:.3f}",
                      str(r["stats"]["reply_fallbacks"]))
    console.print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"machine": "2-core CPU (shared, the server too)", "local": "SmolLM2-135M-Instruct fp32 safetensors",
              "served": f"{args.model} at {args.server} (llama.cpp, Q4_1 GGUF)", "today": args.today,
              "results": results}
    (RESULTS / "gate_served.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    console.print(f"wrote {RESULTS / 'gate_served.json'}")


if __name__ == "__main__":
    main()
