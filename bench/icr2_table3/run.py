"""ICR2 Table 3 at SmolLM2-135M scale: the registered experiment of `bench/data/icr2_table3/preregistration.md`.

    .venv/bin/python bench/icr2_table3/run.py ids          # write the id files (deterministic; committed)
    .venv/bin/python bench/icr2_table3/run.py data         # build the CiC benchmark files into runs/icr2_table3/data
    .venv/bin/python bench/icr2_table3/run.py train ARM    # fine-tune one arm (training/icr2_table3/ARM.yaml),
    resumable
    .venv/bin/python bench/icr2_table3/run.py keep ARM     # copy its adapter (or head) to bench/results (committed)
    .venv/bin/python bench/icr2_table3/run.py probe ARM    # RAP heads of sft_da / sft_rta (on training questions)
    .venv/bin/python bench/icr2_table3/run.py eval [ARM..] # answer the evaluation questions (icr2 compare, resumable)
    .venv/bin/python bench/icr2_table3/run.py report       # the table (Markdown, JSON, PNG) from the answer cache

Every step calls the package (`icr2 build-benchmark`, `icr2 train`, `icr2 compare`); this file only names the
registered inputs. The benchmark files are derived from `../shared/data/` and are rebuilt, never committed.

The arms' table is also the package's preset, runnable from the wheel on any model: `icr2 reproduce icr2-fine-tuning
--set adapters=bench/results/icr2_table3 --set answers_from=bench/results/icr2_table3/arms` reports these committed
answers with the same figures (docs/reproducing.md). The steps here stay: `eval` answers into the committed
`bench/results/icr2_table3/arms` caches under this folder's pipeline files, and `report` adds what the preset does not
(the selecting arms' gold recall against chance, the heads' hit rate before and after fine-tuning, figure 4's counts).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IDS = ROOT / "bench" / "data" / "icr2_table3"
WORK = ROOT / "runs" / "icr2_table3"
DATA = WORK / "data"
RESULTS = ROOT / "bench" / "results" / "icr2_table3"
ICR2 = [str(ROOT / ".venv" / "bin" / "icr2")]

SEED = 26
TRAIN_COUNT, DEV_COUNT = 1000, 100
TRAIN_LIMIT_POSITION = 2000      # positions 2000 and later never train (the project's rule)
EVAL_FIRST_POSITION = 2024       # 2000-2023 were the evaluation questions of bench/finetune_heads.py
BUDGET_PASSAGES = 6
RETRIEVERS = "bm25,dense,hybrid"
TOP_K = 50                       # candidates per retriever (ICR2: 200 over 36M passages; the sample has 3,717)


def sample_ids() -> list[str]:
    from icr2_components.kilt import build_sample

    tasks = build_sample().tasks
    return [json.loads(line)["id"] for line in Path(tasks).read_text().splitlines() if line.strip()]


def held_out_ids() -> set[str]:
    """Every id listed in a held-out file of bench/data (the A/B evaluations and the gates' confirmatory set)."""
    held: set[str] = set()
    for path in (ROOT / "bench" / "data").glob("heldout_nq_ids*.txt"):
        held |= {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}
    return held


def write_ids(name: str, ids: list[str], header: str) -> None:
    IDS.mkdir(parents=True, exist_ok=True)
    (IDS / name).write_text("\n".join([f"# {line}" for line in header.splitlines()] + ids) + "\n")
    print(f"wrote {IDS / name} ({len(ids)} ids)")


def read_ids(name: str) -> list[str]:
    return [line.strip() for line in (IDS / name).read_text().splitlines() if line.strip() and not line.startswith("#")]


def cmd_ids(_args) -> None:
    ids = sample_ids()
    held = held_out_ids()
    train_pool = [i for i in ids[:TRAIN_LIMIT_POSITION] if i not in held]
    eval_pool = [i for i in ids[EVAL_FIRST_POSITION:] if i not in held]
    rng = random.Random(SEED)
    rng.shuffle(train_pool)
    rng.shuffle(eval_pool)
    write_ids("train_ids.txt", train_pool[:TRAIN_COUNT],
              f"{TRAIN_COUNT} training questions: a random.Random({SEED}) shuffle of the NQ-sample positions < "
              f"{TRAIN_LIMIT_POSITION}\nin no bench/data/heldout_nq_ids*.txt file (bench/icr2_table3/run.py ids)")
    write_ids("dev_ids.txt", train_pool[TRAIN_COUNT:TRAIN_COUNT + DEV_COUNT],
              f"{DEV_COUNT} dev questions (validation loss only): the next {DEV_COUNT} of the same shuffle")
    write_ids(
        "eval_ids.txt",
        eval_pool,
        f"{len(eval_pool)} evaluation questions: every NQ-sample position >= {EVAL_FIRST_POSITION} in no held-out "
        f"file,\nin a random.Random({SEED}) order (answered in this order, so a partial run is a random subset)",
    )


def cmd_data(args) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    full = DATA / "all.jsonl"
    splits = {split: read_ids(f"{split}_ids.txt") for split in ("train", "dev", "eval")}
    if not full.exists() or args.rebuild:
        from icr2_components.training.sample_data import build_sample_benchmark

        wanted = {i for ids in splits.values() for i in ids}
        summary = build_sample_benchmark(str(full) + ".part", limit=len(wanted), budget_passages=BUDGET_PASSAGES,
                                         retrievers=RETRIEVERS.split(","), top_k=TOP_K, progress=True,
                                         question_ids=wanted)
        (DATA / "all.summary.json").write_text(json.dumps(summary, indent=1, default=str))
        os.replace(str(full) + ".part", full)
    records = {}
    for line in full.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["id"]] = record
    for split, wanted in splits.items():
        kept = [records[i] for i in wanted if i in records]
        (DATA / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
        print(
            f"{split}: {len(kept)} of {len(wanted)} questions have a CiC record (the others are in all.summary.json's "
            "skips)"
        )
        if split == "train":  # ICR2's ablation: the same questions, gold passages only
            gold = [dict(r, context=[c for c in r["context"] if c["passage_id"] in set(r["gold_passage_ids"])])
                    for r in kept]
            (DATA / "train_gold_only.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gold))


def cmd_train(args) -> None:
    recipe = ROOT / "training" / "icr2_table3" / f"{args.arm}.yaml"
    if not recipe.exists():
        sys.exit(f"no recipe {recipe}")
    extra = ["--set=training.resume_from_checkpoint=true"] if args.resume else []
    subprocess.run([*ICR2, "train", "--config", str(recipe), *extra], check=True, cwd=ROOT)


PIPELINES = ROOT / "bench" / "icr2_table3" / "pipelines"
BASE_READER = "smollm2-135m-instruct"  # the base of every fine-tuned arm (preregistration "Context every arm gets")
ADAPTERS = RESULTS / "adapters"
# arm -> (pipeline, context type): the registered arms (preregistration.md). `corpus` is the record's corpus in
# context (gold + confounders), `gold` its gold passage, `open` the pipeline's own retrieval (or none).
ARMS = {
    "closed_book": ("closed_book", "open"),
    "vanilla_rag": ("vanilla_rag", "open"),
    "untrained": ("untrained", "corpus"),
    "sft_da": ("sft_da", "corpus"),
    "sft_rta": ("sft_rta", "corpus"),
    "sft_cci": ("sft_cci", "corpus"),
    "rethead": ("rethead", "corpus"),
    "sft_da_rap": ("sft_da_rap", "corpus"),
    "sft_rta_rap": ("sft_rta_rap", "corpus"),
    "oracle": ("untrained", "gold"),
    "sft_da_gold_only": ("sft_da_gold_only", "corpus"),
    # the heads' hit rate before fine-tuning (registered secondary; not in the claim's family)
    "untrained_rap": ("untrained_rap", "corpus"),
}


def cmd_keep(args) -> None:
    """Copy a finished arm's adapter (and its training ids) from runs/ to bench/results (committed)."""
    import shutil

    if args.arm == "rethead":  # the head alone (the reader is the base model): output_dir/retrieval_head
        source, target = WORK / "rethead" / "retrieval_head", RESULTS / "rethead"
    else:
        source, target = WORK / args.arm / "adapter", ADAPTERS / args.arm
    if not source.is_dir():
        sys.exit(f"{source} does not exist: train the arm first (bench/icr2_table3/run.py train {args.arm}).")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    for name in ("training_ids.json", "training_summary.json"):
        if (WORK / args.arm / name).exists() and not (target / name).exists():
            shutil.copy(WORK / args.arm / name, target / name)
    print(f"kept {target}")


def cmd_probe(args) -> None:
    """RAP heads of a fine-tuned reader (or of the untrained base reader: the hit rate before fine-tuning), probed on
    100 training questions (never evaluation ones), as the project's RAP bench found best for SmolLM2
    (generated-token queries, mean over them; docs/benchmarks/rap-and-heads.md "Retrieval Attention Probing")."""
    model = BASE_READER if args.arm == "untrained" else str(ADAPTERS / args.arm)
    subprocess.run([*ICR2, "probe-heads", "--benchmark", str(DATA / "train.jsonl"), "--model", model,
                    "--output", str(RESULTS / f"rap_heads_{args.arm}.json"), "--limit", "100", "--q", "4",
                    "--m", "1", "--query-position", "generated_tokens", "--aggregate", "mean",
                    "--dtype", "bfloat16"], check=True, cwd=ROOT)


def cmd_eval(args) -> None:
    for arm in args.arms or list(ARMS):
        pipeline, context_type = ARMS[arm]
        path = PIPELINES / f"{pipeline}.yaml"
        if not path.exists():
            print(f"{arm}: no pipeline {path} yet; skipped")
            continue
        command = [
            *ICR2,
            "compare",
            "--dataset",
            str(DATA / "eval.jsonl"),
            "--question-ids",
            str(IDS / "eval_ids.txt"),
            "--context-types",
            context_type,
            "--pipelines",
            str(path),
            "--out",
            str(RESULTS / "arms" / arm),
        ]
        if args.limit:
            command += ["--limit", str(args.limit)]
        print(" ".join(command[1:]), flush=True)
        subprocess.run(command, check=True, cwd=ROOT)


REFERENCES = ["vanilla_rag", "untrained"]
CLAIM_ARMS = ["sft_da", "sft_rta", "sft_cci", "rethead", "sft_da_rap", "sft_rta_rap"]
# the registered secondary comparisons (ICR2 5.1, each RAP arm against its reader, ICR2's gold-only ablation)
PAIRS = [("sft_rta", "sft_da"), ("sft_cci", "sft_da"), ("sft_da_rap", "sft_da"), ("sft_rta_rap", "sft_rta"),
         ("sft_da", "sft_da_gold_only")]
SELECTING_ARMS = ["rethead", "sft_da_rap", "sft_rta_rap", "untrained_rap"]  # arms that keep some passages
# the heads' hit rate after fine-tuning against before (RAP heads of the untrained reader): one Holm family
BEFORE_ONLY = ["untrained_rap"]
PROBED = ["untrained", "sft_da", "sft_rta"]  # readers whose heads were probed (bench/icr2_table3/run.py probe)
HEADS_AFTER_BEFORE = [("sft_da_rap", "untrained_rap"), ("sft_rta_rap", "untrained_rap")]
# ICR2 Table 3, Mistral-7B, ICR2 NQ column (what each row is read against)
PAPER = {"closed_book": 0.49, "untrained": 0.53, "sft_da": 0.59, "sft_rta": 0.60, "sft_cci": 0.63, "rethead": 0.48,
         "sft_da_rap": 0.64, "sft_rta_rap": 0.63, "oracle": 0.83}


def cmd_report(_args, out: Path = RESULTS) -> None:
    """The table from the committed answer caches, written to ``out`` (bench/rerender_committed.py: a temporary one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.evaluation.compare.cache import resolve_cache_path
    from icr2_components.evaluation.reports.arms_report import (
        arms_markdown,
        arms_report,
        load_arm,
        selection_after_before,
        selection_recall,
    )
    from icr2_components.evaluation.reports.head_hit_rates import heads_above_chance
    from icr2_components.evaluation.statistics.paired_comparison import holm

    def _fmt(rate: dict) -> str:
        return f"{rate['successes']}/{rate['n']} = {rate['rate']:.3f} ({rate['ci95'][0]:.2f}-{rate['ci95'][1]:.2f})"

    arms = {}
    for arm, (pipeline, context_type) in ARMS.items():
        answers = resolve_cache_path(RESULTS / "arms" / arm / "answers.jsonl.gz")  # or an older answers.jsonl
        arms[arm] = load_arm(answers, context_type, pipeline) if answers.exists() else {}
    # the table's rows and its secondary Holm families are the registered arms; untrained_rap only measures the
    # heads before fine-tuning (preregistration Deviations) and is read in its own family below
    table_arms = {arm: records for arm, records in arms.items() if arm not in BEFORE_ONLY}
    report = arms_report(table_arms, REFERENCES, CLAIM_ARMS, question_ids=read_ids("eval_ids.txt"), pairs=PAIRS)
    report["paper_table3_icr2_nq"] = PAPER
    table = arms_markdown(report, REFERENCES)
    # the selecting arms' gold recall against a random pick of as many passages (registered secondary)
    contexts = {}
    if (DATA / "eval.jsonl").exists():
        for line in (DATA / "eval.jsonl").read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                contexts[record["id"]] = [c["doc_id"] for c in record["context"]]
    report["selection_recall"] = {arm: selection_recall(arms[arm], contexts, read_ids("eval_ids.txt"))
                                  for arm in SELECTING_ARMS if arms.get(arm) and contexts}
    if report["selection_recall"]:
        table += ("\n\n| arm | kept a gold passage (95% Wilson) | chance (random pick of as many) | one-sided p |\n"
                  "|---|---|---|---|\n")
        for arm, result in report["selection_recall"].items():
            low, high = result["ci95"]
            table += (f"| {arm} | {result['hits']}/{result['n']} = {result['rate']:.3f} ({low:.2f}-{high:.2f}) | "
                      f"{result['chance']:.3f} | {result['p']:.2g} |\n".replace("| 0 |", "| < 1e-300 |"))
    pairs = {f"{after} vs {before}": selection_after_before(arms[after], arms[before], contexts,
                                                            read_ids("eval_ids.txt"))
             for after, before in HEADS_AFTER_BEFORE if arms.get(after) and arms.get(before) and contexts}
    if pairs:
        for pair, adjusted in zip(pairs.values(), holm([pair["p"] for pair in pairs.values()]), strict=True):
            pair["p_holm"] = adjusted
        report["heads_after_before"] = pairs
        table += ("\n\nThe heads' hit rate after fine-tuning against before (kept a gold passage; exact McNemar, Holm "
                  "over these rows)\n\n| after vs before | n | after (95% Wilson) | before (95% Wilson) | difference | "
                  "discordant | Holm p |\n|---|---|---|---|---|---|---|\n")
        for name, pair in pairs.items():
            table += (f"| {name} | {pair['n']} | {_fmt(pair['after'])} | {_fmt(pair['before'])} | "
                      f"{pair['difference']:+.3f} | {pair['only_arm']} / {pair['only_reference']} | "
                      f"{pair['p_holm']:.2g} |\n")
    # ICR2 figure 4 as numbers: the heads of each probed reader that retrieve above chance (on its probe questions)
    probes = {name: json.loads((RESULTS / f"rap_heads_{name}.json").read_text()) for name in PROBED
              if (RESULTS / f"rap_heads_{name}.json").exists()}
    if probes:
        report["heads_figure4"] = {name: {**heads_above_chance(artifact), "probed_ids_same_as_untrained":
                                          artifact["probed_ids"] == probes.get("untrained", artifact)["probed_ids"]}
                                   for name, artifact in probes.items()}
        table += ("\n\nICR2 figure 4 as numbers: each probed reader's 270 heads at M = 1 on its 100 probe questions "
                  "(training questions; exact one-sided binomial against chance, Holm over the heads)\n\n"
                  "| reader | heads above chance (Holm 0.05) | mean hit rate | best head (layer, head): hit rate "
                  "(95% Wilson) | chance |\n|---|---|---|---|---|\n")
        for name, heads in report["heads_figure4"].items():
            peak = heads["peak"]
            table += (f"| {name} | {heads['heads_above_chance']} of {heads['heads']} | {heads['mean_hit_rate']:.3f} | "
                      f"({peak['layer']}, {peak['head']}): {peak['rate']:.2f} ({peak['ci95'][0]:.2f}-"
                      f"{peak['ci95'][1]:.2f}) | {heads['chance']:.3f} |\n")
    claim = report["claim"]
    verdict = (f"claim ({'complete' if claim['complete'] else 'INCOMPLETE: arms not run count p = 1'}): "
               f"{'HOLDS for ' + ', '.join(claim['arms_for_which_it_holds']) if claim['holds'] else 'does not hold'} "
               f"(family of {claim['family_size']}, margin {claim['min_difference']}, n = {report['n']})")
    print(table + "\n\n" + verdict)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(f"{table}\n\n{verdict}\n")
    names = list(report["arms"])
    rates = [report["arms"][n]["answer_match"] for n in names]
    figure, axis = plt.subplots(figsize=(9, 4))
    axis.bar(names, [r["rate"] for r in rates], yerr=[[r["rate"] - r["ci95"][0] for r in rates],
                                                     [r["ci95"][1] - r["rate"] for r in rates]], capsize=3)
    axis.set_ylabel(f"answer match (95% Wilson), n = {report['n']}")
    axis.set_title("ICR2 Table 3 arms at SmolLM2-135M (6-passage corpus in context)")
    plt.setp(axis.get_xticklabels(), rotation=30, ha="right")
    figure.tight_layout()
    figure.savefig(out / "report.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ids").set_defaults(handler=cmd_ids)
    data = sub.add_parser("data")
    data.add_argument("--rebuild", action="store_true")
    data.set_defaults(handler=cmd_data)
    train = sub.add_parser("train")
    train.add_argument("arm")
    train.add_argument("--resume", action="store_true")
    train.set_defaults(handler=cmd_train)
    keep = sub.add_parser("keep")
    keep.add_argument("arm")
    keep.set_defaults(handler=cmd_keep)
    probe = sub.add_parser("probe")
    probe.add_argument("arm", choices=["sft_da", "sft_rta", "untrained"])
    probe.set_defaults(handler=cmd_probe)
    evaluate = sub.add_parser("eval")
    evaluate.add_argument("arms", nargs="*", choices=[*ARMS, []], metavar="ARM")
    evaluate.add_argument("--limit", type=int)
    evaluate.set_defaults(handler=cmd_eval)
    sub.add_parser("report").set_defaults(handler=cmd_report)
    args = parser.parse_args()
    args.handler(args)


if __name__ == "__main__":
    main()
