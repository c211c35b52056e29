"""Training throughput of SFT on corpus-in-context examples: the project's levers against plain transformers.Trainer.

    PYTHONPATH=$PWD .venv/bin/python bench/training_throughput.py [--train 64] [--dev 32] [--variants ...]

Every variant trains SmolLM2-135M-Instruct (SFT-DA targets) on the same first ``--train`` examples of
`runs/icr2_table3/data/train.jsonl` (6-passage corpora in context, ~850 tokens; `bench/icr2_table3/run.py data`
builds it) for one epoch of batches of 8 examples, at the same learning rate and seed, each in its own process (so
peak RSS is its own). Then the mean target loss on the first ``--dev`` dev examples (fp32, one at a time) is the
"final dev loss". Printed and written (`bench/results/training_throughput.{json,md}`): examples/s, tokens/s, peak
RSS, dev loss with its paired difference from the baseline (bootstrap 95% interval over dev examples), and each
variant's speed as a ratio of the baseline measured in the same run.

Variants:
- ``plain``: transformers.Trainer as a user would write it: fp32, batch 1 x 8 accumulation, the model's own loss
  (logits at every position);
- ``bf16``: the same with bf16 autocast (AMX on CPUs that report amx_bf16 / avx512_bf16);
- ``target_logits``: the same as plain, projecting only target positions (training/target_logits.py);
- ``recipe``: the ICR2 recipes' settings: bf16 + target logits + length-grouped batches of 4 x 2 + 2 threads;
- ``recipe_compile``: the same under ``torch.compile`` (inductor; ``training.torch_compile``): its first steps pay
  for compilation, so ``steady examples/s`` (below) is what a long run approaches;
- ``recipe_lora``: the same with LoRA r 16 on the attention projections (what training/icr2_table3 trains, lr 2e-4);
- ``lora_bf16_weights``: the recipe's settings with LoRA r 16 on the attention projections whose frozen base
  weights are stored in bf16 (no per-step cast of them; the adapters stay fp32, peft's default), at
  ``--lora-learning-rate`` (default: its entry in ``FAST_LORA_LEARNING_RATES``: LoRA learns less per step than full
  fine-tuning, so it needs a higher rate to reach the same dev loss in as many examples);
- ``lora_all_bf16_weights``: the same with LoRA on every linear layer (attention and MLP projections).

Besides examples/s over the whole run, each variant reports ``steady examples/s``: the rate after its first
optimizer step (which carries warm-up, and for ``recipe_compile`` the compilation).

Choosing that rate on the examples that then judge "equal dev loss" would flatter it, so it is chosen on a separate
tuning slice of dev (``--dev-offset 32``: dev examples 32-63) and judged on the first ``--dev`` (``--dev-offset 0``).
Every variant's dev loss is computed in fp32 whatever it trained in.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "runs" / "icr2_table3" / "data"
OUT = ROOT / "bench" / "results"
VARIANTS = ("plain", "bf16", "target_logits", "recipe", "recipe_compile", "recipe_lora", "lora_bf16_weights",
            "lora_all_bf16_weights")
LORA_ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
LORA_ALL_LINEAR = [*LORA_ATTENTION, "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = 5e-5
# each LoRA variant's rate, chosen on the dev tuning slice (bench/data/training_throughput_preregistration.md)
FAST_LORA_LEARNING_RATES = {"lora_bf16_weights": 2e-3, "lora_all_bf16_weights": 1e-3}


def recipe_for(variant: str, steps: int, lora_learning_rate: float | None = None):
    from icr2_components.training.recipe import recipe_from_dict

    training = {"learning_rate": LEARNING_RATE, "max_steps": steps, "device": "cpu", "seed": 0, "save_steps": None,
                "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "target_logits_only": False}
    values = {"method": "da", "model": "smollm2-135m-instruct", "output_dir": f"runs/throughput-{variant}",
              "data": {"train": str(DATA / "train.jsonl")}, "max_seq_length": 2048, "training": training}
    if variant == "bf16":
        training["bf16"] = True
    if variant == "target_logits":
        training["target_logits_only"] = True
    if variant.startswith("recipe") or variant.startswith("lora_"):
        training.update(bf16=True, target_logits_only=True, group_by_length=True, threads=2,
                        per_device_train_batch_size=4, gradient_accumulation_steps=2)
    if variant == "recipe_compile":
        training["torch_compile"] = True
    if "lora" in variant:
        values["finetuning"] = "lora"
        modules = LORA_ALL_LINEAR if variant == "lora_all_bf16_weights" else LORA_ATTENTION
        values["lora"] = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": modules}
        training["learning_rate"] = 2e-4
    if variant in FAST_LORA_LEARNING_RATES:  # the variants with bf16 frozen weights
        training.update(dtype="bfloat16",
                        learning_rate=lora_learning_rate or FAST_LORA_LEARNING_RATES[variant])
    return recipe_from_dict(values)


def step_clock():
    """A Trainer callback keeping the wall-clock time at the end of each optimizer step (in ``.times``)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    return StepClock()


def run_variant(variant: str, train_count: int, dev_count: int, dev_offset: int = 0,
                lora_learning_rate: float | None = None) -> dict:
    """Train one variant in this process and return its figures (called in a child process)."""
    import torch

    from icr2_components.training.dataset import load_sft_examples
    from icr2_components.training.examples import pad_batch
    from icr2_components.training.model_loading import load_trainable
    from icr2_components.training.sft import make_trainer, training_arguments, wrap_lora

    steps = train_count // 8
    recipe = recipe_for(variant, steps, lora_learning_rate)
    model, tokenizer = load_trainable(recipe.model, recipe.training.dtype)
    train = load_sft_examples(DATA / "train.jsonl", tokenizer, "da", 2048, limit=train_count).examples
    dev = load_sft_examples(DATA / "dev.jsonl", tokenizer, "da", 2048, limit=dev_offset + dev_count).examples
    dev = dev[dev_offset:]
    if recipe.finetuning == "lora":
        model = wrap_lora(model, recipe, [])
    if recipe.training.threads:
        torch.set_num_threads(recipe.training.threads)
    args = training_arguments(recipe, False)
    args.disable_tqdm = True
    step_ends = step_clock()
    common = {"model": model, "args": args, "train_dataset": [e.as_features() for e in train],
              "data_collator": lambda f: pad_batch(f, tokenizer.pad_token_id), "callbacks": [step_ends]}
    if variant == "plain":
        from transformers import Trainer

        trainer = Trainer(**common)
    else:
        trainer = make_trainer(recipe, [], **common)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model = trainer.model.float().eval()  # dev loss in fp32 for every variant
    losses = []
    with torch.no_grad():
        for example in dev:
            batch = pad_batch([example.as_features()], tokenizer.pad_token_id)
            losses.append(float(model(**batch).loss))
    tokens = sum(len(e.input_ids) for e in train[: steps * 8])
    return {"variant": variant, "learning_rate": recipe.training.learning_rate, "steps": steps, "examples": steps * 8,
            "seconds": seconds,
            "examples_per_s": steps * 8 / seconds, "tokens_per_s": tokens / seconds,
            # after the first optimizer step (warm-up, and torch.compile's compilation): what a long run approaches
            "steady_examples_per_s": (steps - 1) * 8 / (step_ends.times[-1] - step_ends.times[0]),
            "first_step_seconds": step_ends.times[0] - start,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "dev_losses": losses, "dev_loss": sum(losses) / len(losses)}


def cpu_description() -> str:
    """The CPU's model name and the bf16 instructions it reports (the levers depend on them)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = sorted({f for f in info.split() if f in ("avx512_bf16", "amx_bf16", "amx_tile")})
    return f"{name} ({', '.join(flags) or 'no bf16 instructions'})"


def paired_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    import numpy as np
    from scipy.stats import bootstrap

    diff = np.array(a) - np.array(b)
    result = bootstrap((diff,), np.mean, n_resamples=9999, confidence_level=0.95, rng=np.random.default_rng(0))
    return float(diff.mean()), float(result.confidence_interval.low), float(result.confidence_interval.high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=64, help="training examples (one epoch, batches of 8)")
    parser.add_argument("--dev", type=int, default=32, help="dev examples for the final loss")
    parser.add_argument("--dev-offset", type=int, default=0,
                        help="skip this many dev examples first (32: the tuning slice the LoRA rate is chosen on)")
    parser.add_argument("--lora-learning-rate", type=float, default=None,
                        help="learning rate of the *_bf16_weights LoRA variants (default: each one's tuned rate)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--tag", help="write bench/results/training_throughput_TAG.* (a replicate) instead")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train < 16:  # the steady rate needs a step after the first (batches of 8)
        parser.error("--train must be at least 16 (two optimizer steps of 8 examples)")
    if args.dev < 2:  # the paired bootstrap interval needs two differences
        parser.error("--dev must be at least 2")
    if args.child:
        print(json.dumps(run_variant(args.child, args.train, args.dev, args.dev_offset, args.lora_learning_rate)))
        return
    if not (DATA / "train.jsonl").exists():
        sys.exit("Build the data first: .venv/bin/python bench/icr2_table3/run.py data")
    load = os.getloadavg()
    results = []
    for variant in args.variants:
        print(f"{variant}: training {args.train} examples ...", flush=True)
        rate_args = ["--lora-learning-rate", str(args.lora_learning_rate)] if args.lora_learning_rate else []
        child = subprocess.run([sys.executable, __file__, "--child", variant, "--train", str(args.train), "--dev",
                                str(args.dev), "--dev-offset", str(args.dev_offset), *rate_args],
                               capture_output=True, text=True, cwd=ROOT)
        if child.returncode:
            sys.exit(f"{variant} failed:\n{child.stderr[-3000:]}")
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"  {r['examples_per_s']:.3f} examples/s, {r['tokens_per_s']:.0f} tokens/s, dev loss {r['dev_loss']:.4f}, "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
    base = next((r for r in results if r["variant"] == "plain"), results[0])
    header = (
        "| variant | examples/s | tokens/s | speed vs plain | steady examples/s | steady vs plain | first step s "
        "| peak RSS MiB | dev loss | dev loss - plain [95% CI] |"
    )
    rows = [header, "|" + "---|" * 10]
    for r in results:
        if r is base:  # a difference with itself has no interval
            r["dev_loss_vs_plain"] = None
            interval = "(baseline)"
        else:
            diff, low, high = paired_interval(r["dev_losses"], base["dev_losses"])
            r["dev_loss_vs_plain"] = {"difference": diff, "low": low, "high": high}
            interval = f"{diff:+.4f} [{low:+.4f}, {high:+.4f}]"
        r["speed_vs_plain"] = r["examples_per_s"] / base["examples_per_s"]
        r["steady_vs_plain"] = r["steady_examples_per_s"] / base["steady_examples_per_s"]
        rows.append(
            f"| {r['variant']} | {r['examples_per_s']:.3f} | {r['tokens_per_s']:.0f} | **{r['speed_vs_plain']:.2f}x** "
            f"| {r['steady_examples_per_s']:.3f} | {r['steady_vs_plain']:.2f}x | {r['first_step_seconds']:.0f} "
            f"| {r['peak_rss_mib']:.0f} | {r['dev_loss']:.4f} | {interval} |"
        )
    table = "\n".join(rows)
    print(table)
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"command": " ".join(sys.argv), "loadavg_at_start": load, "cpus": os.cpu_count(), "cpu": cpu_description(),
            "train": args.train,
            "dev": args.dev, "dev_offset": args.dev_offset}
    # a tuning-slice run (the LoRA rate's choice) is kept apart from the judged figures, one file per rate
    rate = f"{args.lora_learning_rate:g}" if args.lora_learning_rate else "default"
    if args.tag:
        stem = f"training_throughput_{args.tag}"
    elif args.dev_offset:
        stem = f"training_throughput_tuning_{'_'.join(args.variants)}_lr{rate}"
    else:
        stem = "training_throughput"
    (OUT / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (OUT / f"{stem}.md").write_text(f"{table}\n\nload average at start {load}\n")


if __name__ == "__main__":
    main()
