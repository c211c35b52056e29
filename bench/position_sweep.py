"""The Lost-in-the-Middle experiment on the bundled NQ sample with SmolLM2-135M-Instruct.

For each question whose gold paragraph is exactly one passage holding an answer:
- closed-book (no passages) and oracle (the gold passage alone);
- 10 and 20 passages: the gold passage among hard confounders (BM25 + dense over the sample index, pooled by
  ConfounderAwareCorpusBuilder at p=1, answer-bearing and gold-overlapping passages excluded, in relevance
  order as in Lost in the Middle), moved by GoldAtPositionReorderer to positions 1, 5, 10 (, 15, 20);
- 10 passages built at confounding ratios p = 0, 0.5, 1 and shuffled (ICR2), gold wherever the shuffle puts it.
Accuracy: an accepted answer (normalised) is contained in the greedy reply (Lost in the Middle's metric).

    .venv/bin/python bench/position_sweep.py --questions 20 --max-new-tokens 12

Writes bench/results/position_sweep.{json,png,md}. The baseline line is closed-book, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--index", default="indexing/kilt-sample.yaml")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--positions-10", default="1,5,10", help="gold positions with 10 passages")
    parser.add_argument("--positions-20", default="1,10,20", help="gold positions with 20 passages (LitM: 1,5,10,15,20)")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    from haystack.dataclasses import ChatMessage
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
    from icr2_components.text.normalization import contains_answer
    from icr2_components.builders.benchmark import GoldPassageLookup
    from icr2_components.kilt import build_sample, read_kilt_tasks
    from icr2_components.readers import LocalChatReader
    from icr2_components.reorderers import GoldAtPositionReorderer
    from icr2_components.stores import open_index

    torch.manual_seed(args.seed)
    sample = build_sample()
    handle = open_index(args.index)
    lookup = GoldPassageLookup.from_knowledge_source(sample.corpus)
    reader = LocalChatReader(model=args.model, max_new_tokens=args.max_new_tokens, dtype="float32", device="cpu")
    reader.warm_up()
    prompt_builder = CorpusInContextPromptBuilder(task_type="qa")
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25", "dense"], budget_passages=20, shuffle=False)
    reorderer = GoldAtPositionReorderer()

    # questions whose gold paragraph is one passage that holds an answer (one needle, as in Lost in the Middle)
    chosen = []
    skipped = {"several gold passages": 0, "gold passage lacks the answer": 0}
    for task in read_kilt_tasks(sample.tasks):
        gold = lookup(task)
        if len(gold) != 1:
            skipped["several gold passages"] += 1
            continue
        if not contains_answer(gold[0].content, task.answers):
            skipped["gold passage lacks the answer"] += 1
            continue
        chosen.append((task, gold))
        if len(chosen) == args.questions:
            break

    positions = {10: [int(p) for p in args.positions_10.split(",")], 20: [int(p) for p in args.positions_20.split(",")]}
    ratios = [0.0, 0.5, 1.0]
    conditions = ["closed-book", "oracle"] + [f"{k} docs @ {p}" for k, ps in positions.items() for p in ps] + [f"10 docs p={r:g}" for r in ratios]
    hits = {c: 0 for c in conditions}
    prompt_tokens = {c: [] for c in conditions}
    examples = []

    def ask(condition: str, messages, answers) -> None:
        reply = reader.run(messages=messages)["replies"][0]
        hits[condition] += int(contains_answer(reply.text, answers))
        prompt_tokens[condition].append(reply.meta["prompt_tokens"])
        if len(examples) < 6:
            examples.append({"condition": condition, "reply": reply.text, "answers": answers})

    def report(n: int, seconds: float, final: bool) -> None:
        """Print and write the results over the first n questions (called after each, so a kill keeps them)."""
        accuracy = {c: hits[c] / n for c in conditions}
        mean_tokens = {c: sum(v) / len(v) for c, v in prompt_tokens.items()}
        closed = accuracy["closed-book"]
        table = Table(title=f"Lost in the Middle on the NQ sample: SmolLM2-135M-Instruct, {n} questions, greedy, {args.max_new_tokens} new tokens")
        for column in ("condition", "accuracy", "correct", "vs closed-book", "prompt tokens"):
            table.add_column(column)
        for c in conditions:
            table.add_row(c, f"{accuracy[c]:.3f}", f"{hits[c]}/{n}", f"{accuracy[c] - closed:+.3f}", f"{mean_tokens[c]:.0f}")
        console = Console()
        if final:
            console.print(table)
        console.print(f"[{'final' if final else 'partial'}] {n * len(conditions)} generations in {seconds:.0f} s; questions skipped while choosing: {skipped}")

        RESULTS.mkdir(parents=True, exist_ok=True)
        result = {
            "model": args.model,
            "questions": n,
            "complete": final,
            "max_new_tokens": args.max_new_tokens,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, threads {torch.get_num_threads()}",
            "seconds": seconds,
            "accuracy": accuracy,
            "correct": hits,
            "mean_prompt_tokens": mean_tokens,
            "skipped_while_choosing": skipped,
            "positions": positions,
            "ratios": ratios,
            "examples": examples,
        }
        (RESULTS / "position_sweep.json").write_text(json.dumps(result, indent=2))

        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for k, ps in positions.items():
            left.plot(ps, [accuracy[f"{k} docs @ {p}"] for p in ps], marker="o", label=f"{k} passages")
        left.axhline(closed, color="grey", linestyle="--", label="closed-book")
        left.axhline(accuracy["oracle"], color="black", linestyle=":", label="oracle")
        left.set_xlabel("position of the gold passage")
        left.set_ylabel("accuracy (answer in reply)")
        left.set_title(f"SmolLM2-135M, NQ sample, n={n}")
        left.legend()
        right.bar([f"p={r:g}" for r in ratios], [accuracy[f"10 docs p={r:g}"] for r in ratios], color="tab:orange")
        right.axhline(closed, color="grey", linestyle="--")
        right.set_title("10 passages, shuffled, by confounding ratio")
        right.set_ylabel("accuracy")
        figure.tight_layout()
        figure.savefig(RESULTS / "position_sweep.png", dpi=120)

        lines = [
            f"# Position sweep (Lost in the Middle) - SmolLM2-135M-Instruct, {n} NQ-sample questions",
            "",
            f"`.venv/bin/python bench/position_sweep.py --questions {args.questions} --max-new-tokens {args.max_new_tokens}` "
            f"({n} of {len(chosen)} questions done{'' if final else ', run still going or stopped early'}); "
            f"{result['machine']}; {seconds:.0f} s.",
            "",
            "| condition | accuracy | correct | vs closed-book | prompt tokens |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {c} | {accuracy[c]:.3f} | {hits[c]}/{n} | {accuracy[c] - closed:+.3f} | {mean_tokens[c]:.0f} |" for c in conditions]
        lines += ["", "![position sweep](position_sweep.png)", ""]
        (RESULTS / "position_sweep.md").write_text("\n".join(lines))
        print(f"wrote {RESULTS / 'position_sweep.json'}, .png, .md")

    start = time.perf_counter()
    progress = tqdm(total=len(chosen) * len(conditions), desc="position sweep", unit=" generations")
    for index, (task, gold) in enumerate(chosen):
        answers = task.answers
        ask("closed-book", [ChatMessage.from_user(f"Answer the following question.\nQuestion: {task.input}\nAnswer:")], answers)
        progress.update()
        ask("oracle", prompt_builder.run(query=task.input, documents=gold)["prompt"], answers)
        progress.update()
        lists = {"bm25": handle.retrieve(task.input, "bm25", 60), "dense": handle.retrieve(task.input, "dense", 60)}
        hard = builder.run(query=task.input, answers=answers, gold_documents=gold, provenance=[vars(p) for p in task.provenance], **lists)["documents"]
        for k, ps in positions.items():
            corpus = [d for d in hard if d.meta["origin"] == "gold"] + [d for d in hard if d.meta["origin"] != "gold"][: k - 1]
            for p in ps:
                ordered = reorderer.run(documents=corpus, position=p)["documents"]
                # ids follow the displayed order, so an id never hints at the gold passage
                ordered = [type(d)(id=d.id, content=d.content, meta={**d.meta, "passage_id": f"PSG{i:03d}"}) for i, d in enumerate(ordered, 1)]
                ask(f"{k} docs @ {p}", prompt_builder.run(query=task.input, documents=ordered)["prompt"], answers)
                progress.update()
        randoms = handle.random_documents(60, seed=args.seed + index, exclude_ids={gold[0].id})
        for r in ratios:
            mixed = builder.run(
                query=task.input, answers=answers, gold_documents=gold, provenance=[vars(p) for p in task.provenance],
                random_documents=randoms, confounding_ratio=r, budget_passages=10, shuffle=True, seed=args.seed, **lists,
            )["documents"]
            ask(f"10 docs p={r:g}", prompt_builder.run(query=task.input, documents=mixed)["prompt"], answers)
            progress.update()
        report(index + 1, time.perf_counter() - start, final=index + 1 == len(chosen))
    progress.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
