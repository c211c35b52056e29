"""SFT-RTA on the bundled NQ sample (CPU), then retrieval-head hit rates (ICR2 figure 4) and answer accuracy
before and after, on questions held apart from training. Long-running; not in CI.

    .venv/bin/python bench/finetune_heads.py --train 64 --eval 24 --steps 40 --passages 4

Writes bench/results/finetune_heads.{json,png,md}: hit-rate heatmaps (M=1) of the base and the fine-tuned
reader, the best heads' hit rates, and accuracy (an answer string in the parsed answer) with the parse rate of
the retrieve-then-answer format. The budget (questions, steps, seconds) is recorded with the machine.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import time
from pathlib import Path


def evaluate_reader(model: str, instances, max_new_tokens: int) -> dict:
    """Greedy replies on the CiC prompts; accuracy = any gold answer in the parsed answer (or whole reply)."""
    from tqdm.auto import tqdm

    from icr2_components.evaluation.metrics.answer_match import answer_match
    from icr2_components.readers import LocalChatReader
    from icr2_components.text.retrieval_replies import parse_generation
    from icr2_components.text.templates import render_cic_prompt

    reader = LocalChatReader(model=model, max_new_tokens=max_new_tokens, dtype="float32", device="cpu")
    correct = parsed_ok = retrieved_gold = 0
    for instance in tqdm(instances, desc=f"answering with {Path(model).name}"):
        prompt = render_cic_prompt("qa", instance.query, instance.documents)
        reply = reader.run(messages=prompt.messages)["replies"][0].text
        parsed = parse_generation(reply, {d.meta["passage_id"]: d.content for d in instance.documents})
        parsed_ok += parsed.has_retrieval
        retrieved_gold += bool(set(instance.gold_passage_ids) & set(parsed.retrieved_ids))
        correct += answer_match(parsed.answer or reply, instance.answers)
    n = len(instances)
    return {"accuracy": correct / n, "retrieval_format_rate": parsed_ok / n, "retrieved_gold_rate": retrieved_gold / n}


def probe(model: str, instances) -> dict:
    from icr2_components.filters.probing.probing_job import probe_to_artifact

    outcome = probe_to_artifact(instances, model, m=1, q=4, max_m=2, dtype="float32", device="cpu")
    return outcome.artifact.to_json()


def plot(before: dict, after: dict, accuracy: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1, 0.7]})
    for axis, (name, artifact) in zip(axes, (("base SmolLM2", before), ("SFT-RTA", after)), strict=True):
        image = axis.imshow(artifact["hit_rates"][0], aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis")
        axis.set_title(f"{name}: hit rate @M=1 (chance {artifact['chance_hit_rates'][0]:.2f})", fontsize=9)
        axis.set_xlabel("head")
        axis.set_ylabel("layer")
    figure.colorbar(image, ax=axes[:2].tolist())
    names = list(accuracy)
    axes[2].bar(names, [accuracy[n]["accuracy"] for n in names], color=["grey", "tab:blue"])
    axes[2].set_ylim(0, 1)
    axes[2].set_title("answer accuracy on held-apart questions", fontsize=9)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=64, help="training questions (sample offset 0..)")
    parser.add_argument("--eval", type=int, default=24, help="held-apart questions (sample offset 2000..)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--passages", type=int, default=4, help="passages per corpus in context")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--new-token-lr", type=float, default=5e-3,
                        help="learning rate of the retrieval-marker embedding rows (training.new_token_learning_rate)")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--work", default="runs/bench-finetune-heads")
    args = parser.parse_args()

    from icr2_components.filters.probing.cic_instances import read_benchmark_instances
    from icr2_components.training.recipe import recipe_from_dict
    from icr2_components.training.sample_data import build_sample_benchmark
    from icr2_components.training.sft import train_sft

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    build_sample_benchmark(work / "train.jsonl", limit=args.train, budget_passages=args.passages, progress=True)
    build_sample_benchmark(
        work / "eval.jsonl", limit=args.eval, budget_passages=args.passages, offset=2000, progress=True
    )
    held = list(read_benchmark_instances(work / "eval.jsonl"))
    before = probe("smollm2-135m-instruct", held)
    accuracy = {"base": evaluate_reader("smollm2-135m-instruct", held, 48)}
    recipe = recipe_from_dict(
        {
            "method": "rta",
            "model": "smollm2-135m-instruct",
            "output_dir": str(work / "rta"),
            "data": {"train": str(work / "train.jsonl")},
            "max_seq_length": 2048,
            "training": {
                "learning_rate": args.lr,
                "new_token_learning_rate": args.new_token_lr,
                "max_steps": args.steps,
                "gradient_accumulation_steps": 2,
                "device": "cpu",
                "save_steps": 10_000,
            },
        }
    )
    trained = train_sft(recipe).summary
    after = probe(str(work / "rta"), held)
    accuracy["SFT-RTA"] = evaluate_reader(str(work / "rta"), held, 256)
    heads = {
        name: [(layer, h, a["hit_rates"][0][layer][h]) for layer, h in a["heads"]]
        for name, a in (("base", before), ("SFT-RTA", after))
    }
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "gpu": None},
        "budget": {"train_questions": args.train, "eval_questions": len(held), "steps": args.steps,
                   "passages": args.passages, "learning_rate": args.lr,
                   "new_token_learning_rate": args.new_token_lr, "seconds": time.perf_counter() - start},
        "train_loss": trained["train_loss"], "skips": trained["skips"],
        "accuracy": accuracy, "top_heads_hit_rate_m1": heads,
        "mean_hit_rate_m1": {"base": _mean(before), "SFT-RTA": _mean(after)},
        "chance_m1": before["chance_hit_rates"][0],
    }
    (out / "finetune_heads.json").write_text(json.dumps(result, indent=1))
    plot(before, after, accuracy, out / "finetune_heads.png")
    lines = [
        "| reader | accuracy | RTA format | gold retrieved | best head hit@1 | mean head hit@1 |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("base", "SFT-RTA"):
        a = accuracy[name]
        lines.append(
            f"| {name} | {a['accuracy']:.2f} | {a['retrieval_format_rate']:.2f} | {a['retrieved_gold_rate']:.2f} "
            f"| {heads[name][0][2]:.2f} | {result['mean_hit_rate_m1'][name]:.3f} |"
        )
    (out / "finetune_heads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(result["budget"]))


def _mean(artifact: dict) -> float:
    rates = [v for layer in artifact["hit_rates"][0] for v in layer]
    return sum(rates) / len(rates)


if __name__ == "__main__":
    main()
