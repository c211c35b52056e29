"""The ICR2 retrieval head on held-apart questions: does it rank their gold passage first above chance, and does
joint training (L_gen + L_ret) lower L_ret on questions it did not train on?

Trains heads on the real SmolLM2 (reader frozen) on ``--train`` NQ-sample questions (from position 0) and scores
``--held`` other questions (from position ``--train``), each with ``--passages`` passages (one or more gold), for
each ``--loss``: top-1 gold hits against the expected hits of a uniformly random pick (exact one-sided binomial
test on the questions with one gold passage, Wilson 95% interval), and mean L_ret on the held questions before
training (the same seeded initial head) and after. The baseline, measured in the same run, is chance:
``hits_over_chance`` is the hit rate over the chance rate. Prints one JSON line per loss and, with
``--results``, writes them all to one JSON file.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python bench/retrieval_head_heldapart.py --train 16 --held 48 \
        --steps 32 --loss retrieval joint --results bench/results/retrieval_head_heldapart.json
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
from pathlib import Path


def hidden_states(model, examples):
    """The frozen reader's final hidden states of each held example, computed once for every head scored."""
    import torch

    from icr2_components.rankers.head_inputs import final_hidden_states

    with torch.no_grad():
        return [final_hidden_states(model, example.head_input.input_ids) for example in examples]


def held_scores(hiddens, head, examples):
    import torch

    head.eval()
    rows = []
    with torch.no_grad():
        for hidden, example in zip(hiddens, examples, strict=True):
            scores = head(hidden, example.head_input.passage_spans, example.head_input.query_span).float().cpu()
            gold = example.gold
            rows.append({"id": example.id, "hit": bool(gold[int(scores.argmax())]), "golds": int(gold.sum()),
                         "passages": len(gold),
                         "loss": float(-torch.log_softmax(scores, -1)[gold].mean())})
    return rows


def summarise(rows, before_rows):
    from scipy.stats import binomtest

    from icr2_components.evaluation.statistics.proportions import wilson_interval

    single = [r for r in rows if r["golds"] == 1]
    passages = {r["passages"] for r in single}
    hits = sum(r["hit"] for r in single)
    chance = sum(r["golds"] / r["passages"] for r in single) / len(single)
    test = binomtest(hits, len(single), chance, alternative="greater") if len(passages) == 1 else None
    low, high = wilson_interval(hits, len(single))
    return {"n_single_gold": len(single), "top1_hits": hits, "hit_rate": hits / len(single),
            "wilson95": [round(low, 3), round(high, 3)], "chance_rate": chance,
            "hits_over_chance": hits / len(single) / chance,
            "binomial_p_greater": None if test is None else test.pvalue,
            "held_l_ret_before": sum(r["loss"] for r in before_rows) / len(before_rows),
            "held_l_ret_after": sum(r["loss"] for r in rows) / len(rows),
            "held_l_ret_lower_after": sum(a["loss"] < b["loss"] for a, b in zip(rows, before_rows, strict=True)),
            "n_held": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=24)
    parser.add_argument("--held", type=int, default=64)
    parser.add_argument("--passages", type=int, default=4)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--loss", nargs="+", default=["retrieval", "joint"])
    parser.add_argument("--out", default=None, help="working folder (sample records, heads); a temporary one if unset")
    parser.add_argument("--results", default=None, help="write every loss's result here as one JSON file")
    args = parser.parse_args()

    import torch

    from icr2_components.rankers.retrieval_head import RetrievalHead
    from icr2_components.training.dataset import load_sft_examples
    from icr2_components.training.joint import joint_examples, train_retrieval_head
    from icr2_components.training.model_loading import load_trainable
    from icr2_components.training.recipe import recipe_from_dict
    from icr2_components.training.sample_data import build_sample_benchmark

    root = Path(args.out or tempfile.mkdtemp(prefix="head-heldapart-"))
    root.mkdir(parents=True, exist_ok=True)
    train_file, held_file = root / "train.jsonl", root / "held.jsonl"
    if not held_file.exists():
        build_sample_benchmark(train_file, limit=args.train, budget_passages=args.passages)
        build_sample_benchmark(held_file, limit=args.held, offset=args.train, budget_passages=args.passages)
    model, tokenizer = load_trainable("smollm2-135m-instruct")
    model.requires_grad_(False)
    held = joint_examples(load_sft_examples(held_file, tokenizer, "da", 2048, "drop_distractors").examples, tokenizer)
    hiddens = hidden_states(model, held)
    del model  # training loads its own copy; only the hidden size is needed from here on
    results = []
    for loss in args.loss:
        start = time.perf_counter()
        recipe = recipe_from_dict({
            "method": "retrieval_head", "model": "smollm2-135m-instruct", "output_dir": str(root / loss),
            "data": {"train": str(train_file)},
            "training": {"max_steps": args.steps, "gradient_accumulation_steps": 1, "device": "cpu"},
            "retrieval_head": {"top_k": 1, "loss": loss, "head_learning_rate": args.lr},
        })
        torch.manual_seed(recipe.training.seed)  # the initial head training starts from
        initial = RetrievalHead(int(hiddens[0].shape[-1]), recipe.retrieval_head.proj_dim)
        before = held_scores(hiddens, initial, held)
        summary = train_retrieval_head(recipe, progress=False)
        trained = RetrievalHead.load(summary["head"])
        after = held_scores(hiddens, trained, held)
        history = summary["history"]
        epoch = max(1, summary["train_examples"])
        result = {"loss": loss, "train_examples": summary["train_examples"], "steps": summary["steps"], "lr": args.lr,
                  "train_l_ret_first_epoch": sum(h["retrieval"] for h in history[:epoch]) / len(history[:epoch]),
                  "train_l_ret_last_epoch": sum(h["retrieval"] for h in history[-epoch:]) / len(history[-epoch:]),
                  **summarise(after, before), "seconds": round(time.perf_counter() - start, 1)}
        print(json.dumps(result), flush=True)
        results.append(result)
        (root / f"{loss}.rows.json").write_text(json.dumps({"before": before, "after": after}))
    if args.results:
        Path(args.results).write_text(json.dumps({"command": vars(args), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
