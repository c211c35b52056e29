"""The Lost-in-the-Middle experiment on the bundled NQ sample with SmolLM2-135M-Instruct: resumable, with intervals.

The paper's protocol (10, 20 and 30 documents at its positions, query-aware too, beside its tables, on any backend)
is the package's registered experiment: ``icr2 reproduce lost-in-the-middle`` (docs/reproducing.md), and ICR2's
confounding-ratio comparison (random against retrieved confounders at token budgets, with closed-book and oracle)
is ``icr2 reproduce icr2-benchmark``. This script stays for what docs/benchmarks/answer-quality.md's "position of the
gold passage"
figures were measured with and the presets do not cover: every position of 10, the held-out question-id file, and
the 10-passage ratio rows of the first 12-question run (``--ratios``).

For each held-out question (``--question-ids``, default bench/data/heldout_nq_ids.txt; questions used by any probe,
tuning run or earlier bench are not in it) whose gold paragraph is exactly one passage holding an answer:
- closed-book (no passages) and oracle (the gold passage alone);
- 10 (and optionally 20) passages: the gold passage among hard confounders (BM25 + dense over the sample index,
  pooled by ConfounderAwareCorpusBuilder at p=1, answer-bearing and gold-overlapping passages excluded, in relevance
  order as in Lost in the Middle), moved by GoldAtPositionReorderer to each position asked (``all`` = every one);
- optionally 10 passages built at confounding ratios (``--ratios 0,0.5,1``) and shuffled (ICR2).
Accuracy: Lost in the Middle's best_subspan_em (an accepted answer, normalised, contained in the greedy reply),
with a 95% Wilson interval per condition; the shape is tested on the same questions (paired): each position
against position 1 (exact McNemar, Holm-adjusted) and all positions together (Cochran's Q).

Every reply is appended to ``<out>/answers.jsonl.gz`` (one gzip member each, merged when the run ends; an older
plain ``answers.jsonl`` there is read and appended to as it is) as it arrives; a re-run skips what is there (resumable
after a kill or a restart), and ``--report-only`` re-scores the cache without a model.

    .venv/bin/python bench/position_sweep.py --questions 100 --positions-10 all --max-new-tokens 32

Writes <out>/position_sweep.{json,png,md} (default out: bench/results/position_sweep). The baseline line is
closed-book, measured in the same run.
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

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def parse_positions(text: str, passages: int) -> list[int]:
    """``"all"`` -> 1..passages; ``"1,5,10"`` -> [1, 5, 10]; ``""`` -> none (the condition is skipped)."""
    if not text.strip():
        return []
    if text.strip() == "all":
        return list(range(1, passages + 1))
    positions = [int(p) for p in text.split(",") if p.strip()]
    bad = [p for p in positions if not 1 <= p <= passages]
    if bad:
        raise SystemExit(f"positions must lie in 1..{passages}; got {bad}")
    return positions


def cache_file(out: Path) -> Path:
    """The run's cache: ``answers.jsonl.gz``, or an older plain ``answers.jsonl`` already there."""
    plain = out / "answers.jsonl"
    return plain if plain.exists() else out / "answers.jsonl.gz"


def read_cache(path: Path) -> dict[tuple[str, str], dict]:
    from icr2_components.records.gzip_lines import read_members

    cache: dict[tuple[str, str], dict] = {}
    if path.exists():
        content = read_members(path) if path.suffix == ".gz" else None
        text = (content.data + content.cut_data).decode("utf-8") if content else path.read_text()
        for line in text.splitlines():
            try:
                record = json.loads(line)
                cache[(record["question_id"], record["condition"])] = record
            except (json.JSONDecodeError, KeyError):
                continue  # a line cut by a kill: its generation is simply redone
    return cache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--question-ids", default=str(ROOT / "bench/data/heldout_nq_ids.txt"),
                        help="ids to draw questions from, in file order (default: the held-out NQ-sample ids)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--index", default="indexing/kilt-sample.yaml")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--positions-10", default="all", help="gold positions with 10 passages ('all' or a list)")
    parser.add_argument("--positions-20", default="", help="gold positions with 20 passages (LitM: 1,5,10,15,20)")
    parser.add_argument("--ratios", default="", help="confounding ratios of shuffled 10-passage contexts, e.g. 0,0.5,1")
    parser.add_argument("--out", default=str(RESULTS / "position_sweep"))
    parser.add_argument("--report-only", action="store_true", help="score the cached replies; no model")
    args = parser.parse_args()

    import torch
    from haystack.dataclasses import ChatMessage
    from tqdm import tqdm

    from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
    from icr2_components.evaluation.experiments.lost_in_the_middle import GOLD_LACKS_ANSWER, SEVERAL_GOLD, one_needle
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup
    from icr2_components.kilt.tasks import read_kilt_tasks
    from icr2_components.readers import LocalChatReader
    from icr2_components.records.gzip_lines import append_member, rewrite
    from icr2_components.reorderers import GoldAtPositionReorderer
    from icr2_components.stores import open_index

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_path = cache_file(out)
    cache = read_cache(cache_path)
    positions = {10: parse_positions(args.positions_10, 10), 20: parse_positions(args.positions_20, 20)}
    positions = {k: v for k, v in positions.items() if v}
    ratios = [float(r) for r in args.ratios.split(",") if r.strip()]
    conditions = (["closed-book", "oracle"] + [f"{k} docs @ {p}" for k, ps in positions.items() for p in ps]
                  + [f"10 docs p={r:g}" for r in ratios])

    wanted = [line.strip() for line in Path(args.question_ids).read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    sample = build_sample()
    tasks = {task.id: task for task in read_kilt_tasks(sample.tasks)}
    unknown = [i for i in wanted if i not in tasks]
    lookup = GoldPassageLookup.from_knowledge_source(sample.corpus)
    # questions whose gold paragraph is one passage that holds an answer (one needle, as in Lost in the Middle)
    chosen = []
    skipped = {SEVERAL_GOLD: 0, GOLD_LACKS_ANSWER: 0, "id not in the sample": len(unknown)}
    for question_id in wanted:
        if len(chosen) == args.questions:
            break
        task = tasks.get(question_id)
        if task is None:
            continue
        gold, reason = one_needle(task, lookup)
        if reason:
            skipped[reason] += 1
            continue
        chosen.append((task, gold))

    todo = [(t, g) for t, g in chosen if any((t.id, c) not in cache for c in conditions)]
    start = time.perf_counter()
    if todo and not args.report_only:
        if cache_path.suffix == ".gz" and cache_path.exists():  # whole records only, one member, before appending
            rewrite(cache_path, 0, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in cache.values()).encode())
        torch.manual_seed(args.seed)
        handle = open_index(args.index)
        reader = LocalChatReader(model=args.model, max_new_tokens=args.max_new_tokens, dtype="float32")
        reader.warm_up()
        prompt_builder = CorpusInContextPromptBuilder(task_type="qa")
        builder = ConfounderAwareCorpusBuilder(retrievers=["bm25", "dense"], budget_passages=20, shuffle=False)
        reorderer = GoldAtPositionReorderer()
        missing = sum(1 for t, _ in todo for c in conditions if (t.id, c) not in cache)
        progress = tqdm(total=missing, desc="position sweep", unit=" generations")

        def ask(task, condition: str, messages) -> None:
            if (task.id, condition) in cache:
                return
            began = time.perf_counter()
            reply = reader.run(messages=messages)["replies"][0]
            record = {"question_id": task.id, "condition": condition, "query": task.input, "answers": task.answers,
                      "reply": reply.text, "prompt_tokens": reply.meta.get("prompt_tokens"),
                      "seconds": round(time.perf_counter() - began, 3)}
            line = json.dumps(record, ensure_ascii=False) + "\n"
            if cache_path.suffix == ".gz":
                append_member(cache_path, line.encode("utf-8"))
            else:
                with cache_path.open("a") as handle_out:
                    handle_out.write(line)
            cache[(task.id, condition)] = record
            progress.update()

        for index, (task, gold) in enumerate(todo):
            ask(
                task,
                "closed-book",
                [ChatMessage.from_user(f"Answer the following question.\nQuestion: {task.input}\nAnswer:")],
            )
            ask(task, "oracle", prompt_builder.run(query=task.input, documents=gold)["prompt"])
            lists = {"bm25": handle.retrieve(task.input, "bm25", 60), "dense": handle.retrieve(task.input, "dense", 60)}
            hard = builder.run(query=task.input, answers=task.answers, gold_documents=gold,
                               provenance=[vars(p) for p in task.provenance], **lists)["documents"]
            for k, ps in positions.items():
                corpus = [d for d in hard if d.meta["origin"] == "gold"] + [
                    d for d in hard if d.meta["origin"] != "gold"
                ][: k - 1]
                for p in ps:
                    ordered = reorderer.run(documents=corpus, position=p)["documents"]
                    # ids follow the displayed order, so an id never hints at the gold passage
                    ordered = [type(d)(id=d.id, content=d.content, meta={**d.meta, "passage_id": f"PSG{i:03d}"})
                               for i, d in enumerate(ordered, 1)]
                    ask(task, f"{k} docs @ {p}", prompt_builder.run(query=task.input, documents=ordered)["prompt"])
            if ratios:
                randoms = handle.random_documents(60, seed=args.seed + index, exclude_ids={gold[0].id})
                for r in ratios:
                    mixed = builder.run(
                        query=task.input, answers=task.answers, gold_documents=gold,
                        provenance=[vars(p) for p in task.provenance], random_documents=randoms, confounding_ratio=r,
                        budget_passages=10, shuffle=True, seed=args.seed, **lists,
                    )["documents"]
                    ask(task, f"10 docs p={r:g}", prompt_builder.run(query=task.input, documents=mixed)["prompt"])
        progress.close()
        if cache_path.suffix == ".gz":  # the one-record members merged: the cache compresses as one file
            rewrite(cache_path, 0, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in cache.values()).encode())
    seconds = time.perf_counter() - start
    done = [t for t, _ in chosen if all((t.id, c) in cache for c in conditions)]
    write_report(args, out, cache, done, conditions, positions, ratios, skipped, len(chosen), seconds)
    return 0


def write_report(args, out: Path, cache: dict, done: list, conditions: list[str], positions: dict, ratios: list,
                 skipped: dict, chosen: int, seconds: float) -> None:
    """Score the cached replies of the fully answered questions; write JSON, Markdown and the plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    from rich.console import Console
    from rich.table import Table

    from icr2_components.evaluation.metrics.answer_match import answer_match
    from icr2_components.evaluation.statistics.proportions import wilson_interval

    n = len(done)
    if n == 0:
        print("no question is fully answered yet")
        return
    outcomes = {c: [bool(answer_match(cache[(t.id, c)]["reply"], t.answers)) for t in done] for c in conditions}
    hits = {c: sum(v) for c, v in outcomes.items()}
    accuracy = {c: hits[c] / n for c in conditions}
    intervals = {c: wilson_interval(hits[c], n) for c in conditions}
    tokens = {c: sum(cache[(t.id, c)]["prompt_tokens"] or 0 for t in done) / n for c in conditions}
    from icr2_components.evaluation.statistics.position_tests import paired_position_test
    from icr2_components.evaluation.statistics.proportions import paired_outcomes

    shape = {}
    for k, ps in positions.items():
        if len(ps) < 2:
            continue
        matrix = [[int(outcomes[f"{k} docs @ {p}"][i]) for p in ps] for i in range(n)]
        tests = paired_position_test(matrix, [str(p) for p in ps], seed=args.seed)
        first_last = tests["first_vs_last"]
        # the recency claim: gold last against the gold passage alone, same questions
        vs_oracle = paired_outcomes(outcomes[f"{k} docs @ {ps[-1]}"], outcomes["oracle"])
        tests["last_vs_oracle"] = {"test": "exact McNemar", **vs_oracle}
        tests["summary"] = (
            f"position {ps[-1]} vs {ps[0]}: {first_last['only_last']} questions right only at {ps[-1]}, "
            f"{first_last['only_first']} only at {ps[0]}, exact McNemar p = {first_last['p_value']:.2g}; across all "
            f"{len(ps)} positions Cochran's Q = {tests['across_positions']['statistic']:.1f} "
            f"(df {tests['across_positions']['df']}), p = {tests['across_positions']['p_value']:.2g}; position "
            f"{ps[-1]} "
            f"vs oracle: {vs_oracle['only_a']} right only at {ps[-1]}, {vs_oracle['only_b']} only with the oracle, "
            f"p = {vs_oracle['p_value']:.2g} (unadjusted; three tests per curve)"
        )
        shape[k] = tests
    closed = accuracy["closed-book"]
    table = Table(title=f"Lost in the Middle on held-out NQ-sample questions: SmolLM2-135M-Instruct, n = {n}, greedy, "
                        f"{args.max_new_tokens} new tokens")
    for column in ("condition", "accuracy", "95% CI (Wilson)", "correct", "vs closed-book", "prompt tokens"):
        table.add_column(column)
    for c in conditions:
        low, high = intervals[c]
        table.add_row(
            c,
            f"{accuracy[c]:.3f}",
            f"{low:.3f}-{high:.3f}",
            f"{hits[c]}/{n}",
            f"{accuracy[c] - closed:+.3f}",
            f"{tokens[c]:.0f}",
        )
    console = Console()
    console.print(table)
    for k, tests in shape.items():
        console.print(f"{k} passages: {tests['summary']}")
    complete = n == args.questions
    result = {
        "model": args.model,
        "questions": n,
        "questions_asked_for": args.questions,
        "complete": complete,
        "question_ids": [t.id for t in done],
        "question_id_file": args.question_ids,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "seconds_this_run": round(seconds, 1),
        "seconds_generating_total": round(sum(r.get("seconds") or 0 for r in cache.values()), 1),
        "metric": "answer_match (Lost in the Middle best_subspan_em)",
        "accuracy": accuracy,
        "ci95_wilson": intervals,
        "correct": hits,
        "mean_prompt_tokens": tokens,
        "shape_tests": shape,
        "skipped_while_choosing": skipped,
        "positions": positions,
        "ratios": ratios,
    }
    (out / "position_sweep.json").write_text(json.dumps(result, indent=2))

    figure, left = plt.subplots(1, 1, figsize=(7, 4.2))
    for k, ps in positions.items():
        values = [accuracy[f"{k} docs @ {p}"] for p in ps]
        errors = [[v - intervals[f"{k} docs @ {p}"][0] for v, p in zip(values, ps, strict=True)],
                  [intervals[f"{k} docs @ {p}"][1] - v for v, p in zip(values, ps, strict=True)]]
        left.errorbar(ps, values, yerr=errors, marker="o", capsize=3, label=f"{k} passages (95% Wilson)")
    left.axhline(closed, color="grey", linestyle="--", label=f"closed-book {closed:.2f}")
    left.axhline(accuracy["oracle"], color="black", linestyle=":", label=f"oracle {accuracy['oracle']:.2f}")
    left.set_xlabel("position of the gold passage")
    left.set_ylabel("accuracy (answer in reply)")
    left.set_title(f"SmolLM2-135M, held-out NQ sample, n={n}")
    left.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "position_sweep.png", dpi=120)
    plt.close(figure)

    lines = [
        f"# Position sweep (Lost in the Middle): SmolLM2-135M-Instruct, {n} held-out NQ-sample questions",
        "",
        f"`.venv/bin/python bench/position_sweep.py --questions {args.questions} --positions-10 {args.positions_10}"
        f" --max-new-tokens {args.max_new_tokens}` ({n} of {args.questions} questions done"
        f"{'' if complete else '; resumable: run the command again'}); {result['machine']}; generation time so far "
        f"{result['seconds_generating_total']:.0f} s.",
        "",
        "| condition | accuracy | 95% CI (Wilson) | correct | vs closed-book | prompt tokens |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {c} | {accuracy[c]:.3f} | {intervals[c][0]:.3f}-{intervals[c][1]:.3f} | {hits[c]}/{n} | "
              f"{accuracy[c] - closed:+.3f} | {tokens[c]:.0f} |" for c in conditions]
    for k, tests in shape.items():
        lines += ["", f"Shape, {k} passages (same questions at every position): {tests['summary']}"]
    lines += ["", "![position sweep](position_sweep.png)", ""]
    (out / "position_sweep.md").write_text("\n".join(lines))
    print(f"wrote {out / 'position_sweep.json'}, .png, .md; skipped while choosing: {skipped}")


if __name__ == "__main__":
    sys.exit(main())
