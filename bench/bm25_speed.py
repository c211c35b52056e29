"""Queries per second of the in-memory store's BM25 (bm25s, content + title, English analyzer) against the old
per-query scoring (Haystack's ``InMemoryDocumentStore`` BM25, BM25Okapi with the same k1/b), measured in the
same run on the same passages and NQ questions, printed as a ratio.

    PYTHONPATH=$PWD .venv/bin/python bench/bm25_speed.py [--copies 1] [--queries 300] [--old-queries 30]

The passages are the bundled sample's (3,717), repeated ``--copies`` times with new ids (ranking cost, not
quality: the copies are the same text). Haystack's scoring walks every passage in Python on each query, so it
answers only ``--old-queries`` questions (the first ones); the new BM25 answers ``--queries``. Build time is
reported for both. Figures for docs/benchmarks/retrieval-and-context.md are taken on idle cores; on busy ones only
the ratio means much.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from icr2_components.kilt import KiltKnowledgeSource, build_sample
from icr2_components.kilt.tasks import read_kilt_tasks
from icr2_components.stores.in_memory_bm25 import FieldedBM25


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=1, help="repeat the sample's passages this many times (new ids)")
    parser.add_argument("--queries", type=int, default=300, help="NQ questions answered by the new BM25")
    parser.add_argument(
        "--old-queries", type=int, default=30, help="NQ questions answered by Haystack's scoring (slow)"
    )
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--k1", type=float, default=0.9)
    parser.add_argument("--b", type=float, default=0.4)
    parser.add_argument("--analyzer", default="english", choices=("english", "standard"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/bm25_speed.json"))
    args = parser.parse_args()
    for name in ("copies", "queries", "old_queries", "top_k"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")

    files = build_sample()
    base = list(KiltKnowledgeSource(files.corpus).documents())
    documents = [replace(d, id=f"{d.id}-c{c}") if c else d for c in range(args.copies) for d in base]
    questions = [task.input for task in read_kilt_tasks(files.tasks, limit=args.queries)]
    print(
        f"{len(documents)} passages ({len(base)} x {args.copies}), {len(questions)} NQ questions, cores: "
        f"{os.cpu_count()}"
    )

    start = time.perf_counter()
    old_store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi", bm25_parameters={"k1": args.k1, "b": args.b})
    old_store.write_documents(documents)
    old_retriever = InMemoryBM25Retriever(old_store, top_k=args.top_k)
    old_build = time.perf_counter() - start
    old_questions = questions[: args.old_queries]
    start = time.perf_counter()
    for question in old_questions:
        old_retriever.run(query=question)
    old_qps = len(old_questions) / (time.perf_counter() - start)

    start = time.perf_counter()
    new = FieldedBM25(documents, args.analyzer, k1=args.k1, b=args.b)
    new_build = time.perf_counter() - start
    start = time.perf_counter()
    for question in questions:
        new.search(question, top_k=args.top_k)
    new_qps = len(questions) / (time.perf_counter() - start)

    ratio = new_qps / old_qps
    print(f"\n{'BM25':<44}{'build s':>9}{'queries':>9}{'queries/s':>11}")
    print(f"{'Haystack InMemoryDocumentStore (BM25Okapi)':<44}{old_build:>9.2f}{len(old_questions):>9}{old_qps:>11.1f}")
    print(f"{f'bm25s content+title ({args.analyzer})':<44}{new_build:>9.2f}{len(questions):>9}{new_qps:>11.1f}")
    print(f"queries/s ratio new / old: {ratio:.0f}x on {len(documents)} passages")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "passages": len(documents), "copies": args.copies, "analyzer": args.analyzer, "cores": os.cpu_count(),
        "old": {"build_s": old_build, "queries": len(old_questions), "qps": old_qps},
        "new": {"build_s": new_build, "queries": len(questions), "qps": new_qps},
        "ratio": ratio,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
