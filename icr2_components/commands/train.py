"""``icr2 train --config training/<recipe>.yaml``: SFT (DA/RTA/CCI, full or LoRA) or joint retrieval-head training."""

from __future__ import annotations

import json


def parse_override(text: str) -> tuple[str, object]:
    """``training.max_steps=2`` -> ("training.max_steps", 2) (the value is read as YAML)."""
    import yaml

    if "=" not in text:
        raise ValueError(f"--set takes KEY=VALUE (e.g. training.max_steps=2), got {text!r}.")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="fine-tune a reader (SFT-DA/RTA/CCI) or train the retrieval head")
    parser.add_argument("--config", required=True, help="recipe YAML (training/*.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe value, e.g. --set training.max_steps=2 (repeatable)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help="only say what the recipe needs (device, GPUs, memory estimate) and whether this machine "
                             "has it; trains nothing")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from icr2_components.preflight import check_input
    from icr2_components.training.recipe import load_recipe
    from icr2_components.training.runner import check_recipe_needs, run_recipe

    check_input(args.config, "--config", folder=False)
    recipe = load_recipe(args.config, dict(parse_override(item) for item in args.set))
    if args.check:
        check_recipe_needs(recipe, announce=print)
        print("this machine has what the recipe needs")
        return 0
    summary = run_recipe(recipe, progress=not args.no_progress, announce=print)
    keys = ("method", "model", "saved", "head", "global_steps", "steps", "train_examples", "validation_examples",
            "first_examples_loss_before", "first_examples_loss_after", "validation", "seconds")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=1, default=str))
    skips = summary.get("skips", {})
    for split, report in skips.items():
        if report.get("total"):
            print(f"{split}: skipped {report['total']} records {json.dumps(report['counts'])}")
    print(f"wrote {recipe.output_dir} (training_summary.json has the full log)")
    return 0
