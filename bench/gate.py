"""Benchmark of the adaptive-retrieval gate on SmolLM2-135M-Instruct (CPU).

    .venv/bin/python bench/gate.py [--latency-questions 12] [--today 2025-12-01] [--threads N]

1. Decision latency: the single-forward-pass gate (next-token logits of "Yes"/"No"; by default reusing the
   key/value cache of the prefix shared with the previous prompt, and also without that reuse) against the same gate
   generating its answer (`model_settings={"local_scoring": "generate"}`: greedy, same model, same rendered TA-ARE
   prompt with the "[" answer prefix, stops at end of turn, at most 8 new tokens) and parsing it. Same run, calls
   interleaved (the machine is shared); ratio printed.
2. Retrieval accuracy of TA-ARE (both demonstration orders) against vanilla prompting and the calibration
   baseline (vanilla P(yes) >= t) on bench/data/gate_eval.jsonl, per data source; macro P/R/F1 and the AUROC
   of P(yes) over all labelled questions.

Writes bench/results/gate.json and bench/results/gate.png.
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

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tqdm import tqdm  # noqa: E402

from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl  # noqa: E402
from icr2_components.evaluation.gates.retrieval_decisions import retrieval_auroc, score_retrieval_decisions  # noqa: E402
from icr2_components.gates import TimeAwareRetrievalGate  # noqa: E402

DATA = ROOT / "bench" / "data" / "gate_eval.jsonl"
RESULTS = ROOT / "bench" / "results"
CPU = {"model_settings": {"dtype": "float32", "device": "cpu"}}


def measure_latency(records, today: str, count: int) -> dict:
    gates = {
        "single_forward": TimeAwareRetrievalGate(method="ta_are", today=today, **CPU),
        "single_forward_whole_prompt": TimeAwareRetrievalGate(
            method="ta_are", today=today, model_settings={**CPU["model_settings"], "reuse_prompt_prefix": False}
        ),
        "generate": TimeAwareRetrievalGate(
            method="ta_are", today=today, max_new_tokens=8,
            model_settings={**CPU["model_settings"], "local_scoring": "generate"},
        ),
    }
    for gate in gates.values():
        gate.warm_up()
        gate.run(query=records[0].question)  # untimed: first-call allocations (and the prefix cache's first entry)
    generating = gates["generate"]
    timings = {name: [] for name in gates}
    reused = []
    agreement = 0
    replies = []
    questions = [r.question for r in records[1 : count + 1]]
    for index, question in enumerate(tqdm(questions, desc="latency", unit="q")):
        order = list(gates.items())
        order = order[index % 3:] + order[: index % 3]  # rotate who goes first: the machine is shared
        decisions = {}
        for name, gate in order:
            start = time.perf_counter()
            decisions[name] = gate.run(query=question)["decision"]
            timings[name].append(time.perf_counter() - start)
        reused.append(decisions["single_forward"]["reused_prefix_tokens"])
        agreement += decisions["single_forward"]["retrieve"] == decisions["generate"]["retrieve"]
        replies.append(decisions["generate"]["reply"])
    summary = {name: {"mean_s": statistics.mean(v), "median_s": statistics.median(v)} for name, v in timings.items()}
    summary["ratio_mean"] = summary["single_forward"]["mean_s"] / summary["generate"]["mean_s"]
    summary["ratio_median"] = summary["single_forward"]["median_s"] / summary["generate"]["median_s"]
    summary["ratio_whole_prompt_mean"] = (
        summary["single_forward_whole_prompt"]["mean_s"] / summary["generate"]["mean_s"]
    )
    summary["ratio_whole_prompt_median"] = (
        summary["single_forward_whole_prompt"]["median_s"] / summary["generate"]["median_s"]
    )
    summary["mean_reused_prefix_tokens"] = statistics.mean(reused)
    summary["questions"] = len(questions)
    summary["decision_agreement"] = agreement / len(questions)
    summary["unparsed_generated_replies"] = generating.stats["unparsed_replies"]
    summary["generated_replies"] = replies
    summary["timings_s"] = timings
    return summary


def measure_accuracy(records, today: str) -> dict:
    gates = {
        "vanilla": TimeAwareRetrievalGate(method="vanilla", **CPU),
        "ta_are": TimeAwareRetrievalGate(method="ta_are", today=today, **CPU),
        "ta_are no_first": TimeAwareRetrievalGate(method="ta_are", today=today, demonstration_order="no_first", **CPU),
    }
    rows = []
    for record in tqdm(records, desc="decisions", unit="q"):
        row = {"question": record.question, "source": record.source, "needs_retrieval": record.needs_retrieval}
        for name, gate in gates.items():
            decision = gate.run(query=record.question)["decision"]
            row[f"{name} p_yes"] = decision["p_yes"]
            if name == "ta_are":
                row["ta_are demonstrations"] = [d["question"] for d in decision["demonstrations"]]
        rows.append(row)
    methods = {name: (lambda r, name=name: r[f"{name} p_yes"] >= 0.5) for name in gates}
    scores_of = {name: f"{name} p_yes" for name in gates}
    for t in (0.25, 0.5, 0.75):
        methods[f"threshold t={t}"] = lambda r, t=t: r["vanilla p_yes"] >= t
        scores_of[f"threshold t={t}"] = "vanilla p_yes"
    groups = {"needs retrieval (all)": [r for r in rows if r["needs_retrieval"]]}
    for source in sorted({r["source"] for r in rows}):
        groups[source] = [r for r in rows if r["source"] == source]
    groups["all labelled"] = rows
    scores = {}
    for group, members in groups.items():
        scores[group] = {}
        for name, decide in methods.items():
            labels = [r["needs_retrieval"] for r in members]
            result = score_retrieval_decisions([decide(r) for r in members], labels).as_dict()
            result["auroc"] = retrieval_auroc([r[scores_of[name]] for r in members], labels)
            scores[group][name] = result
    return {"scores": scores, "rows": rows}


def plot(latency: dict, accuracy: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = ["single_forward", "single_forward_whole_prompt", "generate"]
    left.bar(["single pass\n(prefix reused)", "single pass\n(whole prompt)", "generate"],
             [latency[n]["mean_s"] * 1000 for n in names], color=["tab:blue", "tab:cyan", "tab:gray"])
    left.set_ylabel("mean decision latency (ms)")
    left.set_title(f"gate decision latency (ratio {latency['ratio_mean']:.2f})")
    groups = [g for g in accuracy["scores"] if g != "all labelled"]
    width = 0.38
    for offset, method, colour in ((-width / 2, "vanilla", "tab:orange"), (width / 2, "ta_are", "tab:blue")):
        values = [100 * (accuracy["scores"][g][method]["retrieval_accuracy"] or 0) for g in groups]
        right.bar([i + offset for i in range(len(groups))], values, width, label=method, color=colour)
    right.set_xticks(range(len(groups)), groups, rotation=15)
    right.set_ylabel("retrieval accuracy (%)")
    right.set_title("TA-ARE vs vanilla, SmolLM2-135M")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--today", default="2025-12-01", help="date in the TA-ARE prompt (fixed for reproducibility)")
    parser.add_argument("--latency-questions", type=int, default=12)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (the machine is shared)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    # A wide console when piped or captured, so the table is not squeezed into 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    records, skips = read_retrievalqa_jsonl(args.data)
    console.print(skips.summary())
    latency = measure_latency(records, args.today, args.latency_questions)
    accuracy = measure_accuracy(records, args.today)

    table = Table(
        title=f"gate decision latency, {latency['questions']} questions, torch threads={torch.get_num_threads()}"
    )
    for column in ("gate", "mean ms", "median ms", "ratio vs generate (mean)", "ratio (median)"):
        table.add_column(column, justify="right")
    table.add_row("generate (baseline)", f"{latency['generate']['mean_s'] * 1000:.0f}",
                  f"{latency['generate']['median_s'] * 1000:.0f}", "1.00", "1.00")
    table.add_row(
        "single forward pass (prefix reused, the default)",
        f"{latency['single_forward']['mean_s'] * 1000:.0f}",
        f"{latency['single_forward']['median_s'] * 1000:.0f}",
        f"{latency['ratio_mean']:.2f}",
        f"{latency['ratio_median']:.2f}",
    )
    table.add_row(
        "single forward pass (whole prompt)",
        f"{latency['single_forward_whole_prompt']['mean_s'] * 1000:.0f}",
        f"{latency['single_forward_whole_prompt']['median_s'] * 1000:.0f}",
        f"{latency['ratio_whole_prompt_mean']:.2f}",
        f"{latency['ratio_whole_prompt_median']:.2f}",
    )
    console.print(table)
    console.print(f"mean prompt tokens reused from the previous prompt: {latency['mean_reused_prefix_tokens']:.0f}")
    console.print(f"decisions agree on {100 * latency['decision_agreement']:.0f}% of questions; "
                  f"{latency['unparsed_generated_replies']} generated replies said neither yes nor no; "
                  f"replies seen: {sorted(set(latency['generated_replies']))}")

    table = Table(title="retrieval decisions on bench/data/gate_eval.jsonl (%)")
    for column in ("group", "method", "n", "retrieval rate", "retrieval acc", "macro P", "macro R", "F1", "AUROC"):
        table.add_column(column, justify="left" if column in ("group", "method") else "right")
    for group, methods in accuracy["scores"].items():
        for method, s in methods.items():
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
            table.add_row(group, method, str(s["count"]), pct(s["retrieval_rate"]), pct(s["retrieval_accuracy"]),
                          pct(s["precision"]), pct(s["recall"]), pct(s["f1"]),
                          "-" if s["auroc"] is None else f"{s['auroc']:.3f}")
    console.print(table)
    needs = accuracy["scores"]["needs retrieval (all)"]
    console.print(
        f"TA-ARE vs vanilla retrieval accuracy on questions that need retrieval: "
        f"{100 * needs['ta_are']['retrieval_accuracy']:.1f}% vs {100 * needs['vanilla']['retrieval_accuracy']:.1f}%"
    )

    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"machine": "2-core CPU (shared), 24 GB, no GPU", "model": "smollm2-135m-instruct", "today": args.today,
              "torch_threads": torch.get_num_threads(), "latency": latency, "accuracy": accuracy}
    (RESULTS / "gate.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    plot(latency, accuracy, RESULTS / "gate.png")
    console.print(f"wrote {RESULTS / 'gate.json'} and {RESULTS / 'gate.png'}")


if __name__ == "__main__":
    main()
