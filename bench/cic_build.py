"""Corpus-in-context build speed: ConfounderAwareCorpusBuilder's assembler against a straightforward version.

Real inputs: NQ-sample questions, 5 ranked lists of 200 real passages each (BM25Okapi, BM25L and BM25Plus on
query + answers, BM25Okapi and BM25Plus on the query alone, over the bundled sample), the gold passages, and a
random pool. Every check is on: gold-span overlap, answer containment, duplicate ids, exact and near
duplicates, the ratio p, the budget. The straightforward baseline concatenates the lists (sorted by rank, which
is the same pooling) and rescans: each candidate is compared with every kept passage, texts are normalised
afresh for every query, tokens are counted with one tokenizer call per passage. Both must return identical
corpora (checked); only speed differs.

With a token budget the builder runs twice: counting each passage it has not seen (``use_stored_counts=False``)
and reading the counts stored with each passage at indexing (``token_counts`` meta, attached here by the
indexing step itself, ``with_token_counts``); both must return the baseline's corpora. The table gives the
stored-count build's ratio against the passage budget and against counting, measured in the same run.

    .venv/bin/python bench/cic_build.py --queries 60 --token-queries 60

Writes bench/results/cic_build.{json,png}.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def straightforward_build(
    query, lists, answers, gold, provenance, randoms, ratio, budget_passages, budget_tokens, count_one, seed
):
    """The obvious implementation: one concatenated list, every check done by rescanning what is kept."""
    from haystack import Document

    from icr2_components.builders.near_duplicates import jaccard, word_shingles
    from icr2_components.kilt.chunking import spans_overlap
    from icr2_components.text.normalization import normalize_text

    def span_of(d):
        m = d.meta
        return (
            m["wikipedia_id"],
            (m["start_paragraph_id"], m["start_character"]),
            (m["end_paragraph_id"], m["end_character"]),
        )

    concatenated = []
    for order, (name, docs) in enumerate(lists.items()):
        concatenated += [(rank, order, name, d) for rank, d in enumerate(docs, start=1)]
    concatenated.sort(key=lambda item: (item[0], item[1]))
    spans = [span_of(g) for g in gold] + [(p.wikipedia_id, *p.span()) for p in provenance]
    kept = [(g, "gold", i) for i, g in enumerate(gold, start=1)]
    kept_norm = [normalize_text(g.content) for g in gold]
    kept_shingles = [word_shingles(n) for n in kept_norm]
    looked_at: list[Document] = list(gold)
    used = sum(count_one(g) for g in gold) if budget_tokens else 0
    rng = random.Random(f"{seed}\x1fpool\x1f{query}")
    order = list(range(len(randoms)))
    rng.shuffle(order)
    streams = {
        "retriever": iter([(d, name, rank) for rank, _, name, d in concatenated]),
        "random": iter([(randoms[i], "random", r) for r, i in enumerate(order, start=1)]),
    }

    def next_ok(source):
        for d, origin, rank in streams[source]:
            if not d.content or not d.content.strip():
                continue
            if any(other.id == d.id for other in looked_at):
                continue
            looked_at.append(d)
            wid, start, end = span_of(d)
            if any(w == wid and spans_overlap(start, end, s, e) for w, s, e in spans):
                continue
            norm = normalize_text(d.content)
            if any(normalize_text(a) and normalize_text(a) in norm for a in answers):
                continue
            if norm in kept_norm:
                continue
            shingles = word_shingles(norm)
            if any(jaccard(shingles, other) >= 0.8 for other in kept_shingles):
                continue
            return d, origin, rank, norm, shingles
        return None

    confounders = 0
    while True:
        if budget_passages is not None and len(kept) >= budget_passages:
            break
        k = confounders + 1
        source = "retriever" if int(ratio * k + 0.5 + 1e-9) > int(ratio * (k - 1) + 0.5 + 1e-9) else "random"
        item = next_ok(source)
        if item is None:
            break
        d, origin, rank, norm, shingles = item
        if budget_tokens is not None:
            cost = count_one(d)
            if used + cost > budget_tokens:
                break
            used += cost
        kept.append((d, origin, rank))
        kept_norm.append(norm)
        kept_shingles.append(shingles)
        confounders += 1
    positions = list(range(len(kept)))
    random.Random(f"{seed}\x1fshuffle\x1f{query}").shuffle(positions)
    return [(kept[i][0].id, kept[i][1]) for i in positions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--passages", type=int, default=200, help="context size in passages")
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--token-queries", type=int, default=20, help="queries for the token-budget comparison")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from icr2_components.builders.corpus_assembly import CorpusAssembler
    from icr2_components.kilt import KiltKnowledgeSource, build_sample
    from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
    from icr2_components.models.cache import MODEL_CACHE
    from icr2_components.models.token_counting import PassageTokenCounter, with_token_counts

    load_start = os.getloadavg()[0]
    sample = build_sample()
    tokenizer = MODEL_CACHE.tokenizer("smollm2-135m-instruct")
    start = time.perf_counter()
    # what indexing does (IndexHandle.build with corpus.count_tokens_for): each passage's count stored in its meta
    documents = list(
        with_token_counts(
            KiltKnowledgeSource(sample.corpus).documents(), [PassageTokenCounter(tokenizer, max_cache_entries=0)]
        )
    )
    counting_seconds = time.perf_counter() - start
    by_id = {d.id: d for d in documents}
    spans = PassageSpanIndex.from_documents(documents)
    retrievers = {}
    for algorithm in ("BM25Okapi", "BM25L", "BM25Plus"):
        store = InMemoryDocumentStore(bm25_algorithm=algorithm)
        store.write_documents(documents)
        retrievers[algorithm] = InMemoryBM25Retriever(store)
    inputs = []
    for task in tqdm(
        list(read_kilt_tasks(sample.tasks, limit=args.queries)), desc="retrieving 5 lists x 200", unit=" queries"
    ):
        gold = [by_id[i] for i in spans.gold_passage_ids(task.provenance)]
        qa = task.input + " " + " ".join(task.answers)
        lists = {
            "okapi_qa": retrievers["BM25Okapi"].run(query=qa, top_k=200)["documents"],
            "bm25l_qa": retrievers["BM25L"].run(query=qa, top_k=200)["documents"],
            "plus_qa": retrievers["BM25Plus"].run(query=qa, top_k=200)["documents"],
            "okapi_q": retrievers["BM25Okapi"].run(query=task.input, top_k=200)["documents"],
            "plus_q": retrievers["BM25Plus"].run(query=task.input, top_k=200)["documents"],
        }
        randoms = random.Random(task.id).sample(documents, 400)
        inputs.append((task, gold, lists, randoms))

    rows = []

    def time_ours(label, queries, assembler, budget_passages=None, budget_tokens=None):
        outputs, sizes = [], []
        start = time.perf_counter()
        for task, gold, lists, randoms in tqdm(queries, desc=label, unit=" queries"):
            result = assembler.assemble(
                task.input,
                lists,
                answers=task.answers,
                gold_documents=gold,
                provenance=task.provenance,
                random_documents=randoms,
                confounding_ratio=args.ratio,
                budget_passages=budget_passages,
                budget_tokens=budget_tokens,
                seed=0,
            )
            outputs.append([(d.id, d.meta["origin"]) for d in result.documents])
            sizes.append(len(result.documents))
        return time.perf_counter() - start, outputs, sizes

    def time_baseline(label, queries, budget_passages=None, budget_tokens=None):
        count_one = lambda d: len(  # noqa: E731
            tokenizer(
                "\n\nID: PSG000\nTitle: " + d.meta.get("title", "") + "\nContext: " + d.content,
                add_special_tokens=False,
            )["input_ids"]
        )
        outputs = []
        start = time.perf_counter()
        for task, gold, lists, randoms in tqdm(queries, desc=label, unit=" queries"):
            outputs.append(
                straightforward_build(
                    task.input,
                    lists,
                    task.answers,
                    gold,
                    task.provenance,
                    randoms,
                    args.ratio,
                    budget_passages,
                    budget_tokens,
                    count_one,
                    0,
                )
            )
        return time.perf_counter() - start, outputs

    console = Console(width=160)
    token_label = f"{args.passages * 130:,} SmolLM2 tokens"
    baselines: dict[str, tuple] = {}
    for label, queries, kwargs, stored in (
        (f"{args.passages} passages", inputs, {"budget_passages": args.passages}, None),
        (f"{token_label}, counting", inputs[: args.token_queries], {"budget_tokens": args.passages * 130}, False),
        (f"{token_label}, stored counts", inputs[: args.token_queries], {"budget_tokens": args.passages * 130}, True),
    ):
        base_key = label.split(",")[0]
        if base_key not in baselines:  # one baseline per budget, shared by both token-budget builds
            baselines[base_key] = time_baseline(f"baseline, {base_key}", queries, **kwargs)
        base_seconds, base_outputs = baselines[base_key]
        counter = PassageTokenCounter(tokenizer, use_stored_counts=stored) if stored is not None else None
        assembler = CorpusAssembler(count_tokens=counter.count_many if counter else None)  # caches start empty
        ours_seconds, ours_outputs, sizes = time_ours(f"builder (cold caches), {label}", queries, assembler, **kwargs)
        # a second pass: per-passage features and token counts cached, as when many instances share a corpus
        warm_seconds, warm_outputs, _ = time_ours(f"builder (warm caches), {label}", queries, assembler, **kwargs)
        identical = base_outputs == ours_outputs == warm_outputs
        if not identical:
            raise SystemExit(f"{label}: the builder and the baseline returned different corpora")
        n = len(queries)
        rows.append(
            {
                "budget": label,
                "queries": n,
                "mean_passages": sum(sizes) / n,
                "baseline_qps": n / base_seconds,
                "builder_qps": n / ours_seconds,
                "builder_warm_qps": n / warm_seconds,
                "speedup": base_seconds / ours_seconds,
                "speedup_warm": base_seconds / warm_seconds,
                "identical_outputs": identical,
                "tokenized_passages": counter.cache_size() if counter else None,
            }
        )

    table = Table(title=f"CiC build, 5 retriever lists x 200, p={args.ratio}, all checks on (one process)")
    for column in (
        "budget",
        "queries",
        "passages/ctx",
        "baseline q/s",
        "builder q/s cold",
        "ratio cold",
        "builder q/s warm",
        "ratio warm",
        "same",
    ):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["budget"],
            str(row["queries"]),
            f"{row['mean_passages']:.1f}",
            f"{row['baseline_qps']:.1f}",
            f"{row['builder_qps']:.1f}",
            f"{row['speedup']:.1f}x",
            f"{row['builder_warm_qps']:.1f}",
            f"{row['speedup_warm']:.1f}x",
            str(row["identical_outputs"]),
        )
    console.print(table)
    by_label = {row["budget"].split(", ")[-1]: row for row in rows}
    stored_row, counting_row, passage_row = by_label["stored counts"], by_label["counting"], rows[0]
    ratios = {
        "stored_vs_passage_budget_cold": stored_row["builder_qps"] / passage_row["builder_qps"],
        "stored_vs_passage_budget_warm": stored_row["builder_warm_qps"] / passage_row["builder_warm_qps"],
        "stored_vs_counting_cold": stored_row["builder_qps"] / counting_row["builder_qps"],
        "stored_vs_counting_warm": stored_row["builder_warm_qps"] / counting_row["builder_warm_qps"],
    }
    cold_vs_passages = ratios["stored_vs_passage_budget_cold"]
    warm_vs_passages = ratios["stored_vs_passage_budget_warm"]
    cold_vs_counting, warm_vs_counting = ratios["stored_vs_counting_cold"], ratios["stored_vs_counting_warm"]
    console.print(
        f"token budget with stored counts: {stored_row['builder_qps']:.1f} q/s cold = {cold_vs_passages:.2f}x "
        f"the passage budget, {cold_vs_counting:.1f}x counting (warm {warm_vs_passages:.2f}x, "
        f"{warm_vs_counting:.1f}x); passages tokenized while building: {stored_row['tokenized_passages']} "
        f"with stored counts, {counting_row['tokenized_passages']} counting. Counting all {len(documents):,} "
        f"passages at indexing took {counting_seconds:.1f} s."
    )
    load_end = os.getloadavg()[0]
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load_start:.1f} at the start, "
        f"{load_end:.1f} at the end"
    )
    console.print(f"machine: {machine}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cic_build.json").write_text(
        json.dumps(
            {
                "ratio": args.ratio,
                "machine": machine,
                "rows": rows,
                "ratios": ratios,
                "indexing_count_seconds": counting_seconds,
            },
            indent=2,
        )
    )
    figure, axis = plt.subplots(figsize=(9, 3.5))
    labels = [row["budget"] for row in rows]
    xs = range(len(rows))
    axis.bar([x - 0.27 for x in xs], [row["baseline_qps"] for row in rows], width=0.27, label="straightforward")
    axis.bar(list(xs), [row["builder_qps"] for row in rows], width=0.27, label="builder, cold caches")
    axis.bar(
        [x + 0.27 for x in xs], [row["builder_warm_qps"] for row in rows], width=0.27, label="builder, warm caches"
    )
    axis.axhline(100, color="grey", linestyle="--", label="target 100 q/s")
    axis.set_xticks(list(xs), labels)
    axis.set_ylabel("queries / second")
    axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "cic_build.png", dpi=120)
    print(f"wrote {RESULTS / 'cic_build.json'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
