"""nDCG@10 and recall@100 of BM25, dense and hybrid retrieval on both stores, for any BEIR-format folder.

    .venv/bin/python bench/retrieval_quality.py DIR [--stores in_memory,elasticsearch] [--max-queries N]
        [--methods bm25,dense,hybrid] [--analyzer english|standard]
    .venv/bin/python bench/retrieval_quality.py --make-from-sample DIR   # write the NQ sample as a BEIR folder

DIR holds `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`) and `qrels/test.tsv`
(`query-id`, `corpus-id`, `score`, with a header line). Elasticsearch is reached at ICR2_ES_URL
(default http://127.0.0.1:9200); start it with `bash scripts/elasticsearch.sh start`. With `--methods bm25` the
passages are not embedded (minutes saved on CPU). `--analyzer` sets store.analyzer for both stores (the
default: english; see icr2_components/stores/text_analysis.py). The last line compares the two stores' BM25.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import csv
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from haystack import Document
from sklearn.metrics import ndcg_score
from tqdm import tqdm

from icr2_components.kilt import KiltKnowledgeSource, build_sample
from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.stores import IndexHandle, index_config_from_dict


def ndcg_at_k(ranked_ids: list[str], relevance: dict[str, int], k: int = 10) -> float:
    """nDCG@k (linear gain, log2 discount) by sklearn's ``ndcg_score``; the ideal ranking is taken over every judged
    passage, retrieved or not, so the entries are the top k as ranked (padded with unjudged ones to k, and to the two
    entries sklearn needs), followed by the judged passages the top k missed, scored below all of them."""
    top = ranked_ids[:k]
    in_top = set(top)
    missed = [rel for doc_id, rel in relevance.items() if doc_id not in in_top]
    gains = [relevance.get(doc_id, 0) for doc_id in top] + [0] * (max(k, 2) - len(top)) + missed
    if not any(gains):
        return 0.0
    scores = -np.arange(len(gains), dtype=np.float64)  # strictly decreasing: the order above, no ties
    return float(ndcg_score([gains], [scores], k=k))


def recall_at_k(ranked_ids: list[str], relevance: dict[str, int], k: int = 100) -> float:
    relevant = {doc_id for doc_id, rel in relevance.items() if rel > 0}
    return len(relevant & set(ranked_ids[:k])) / len(relevant) if relevant else 0.0


def read_beir(folder: Path, max_queries: int | None):
    corpus = []
    with open(folder / "corpus.jsonl") as handle:
        for line in handle:
            record = json.loads(line)
            corpus.append(
                Document(id=str(record["_id"]), content=record.get("text", ""), meta={"title": record.get("title", "")})
            )
    queries = {}
    with open(folder / "queries.jsonl") as handle:
        for line in handle:
            record = json.loads(line)
            queries[str(record["_id"])] = record["text"]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(folder / "qrels" / "test.tsv") as handle:
        reader = csv.reader(handle, delimiter="\t")
        next(reader)
        for query_id, corpus_id, score in reader:
            qrels[query_id][corpus_id] = int(score)
    judged = [q for q in queries if q in qrels]
    if max_queries:
        judged = judged[:max_queries]
    return corpus, {q: queries[q] for q in judged}, qrels


def make_from_sample(folder: Path, max_queries: int = 300) -> None:
    """Write the bundled NQ sample as BEIR: passages as the corpus, gold passages as qrels."""
    files = build_sample()
    passages = list(KiltKnowledgeSource(files.corpus).passages())
    span_index = PassageSpanIndex.from_passages(passages)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for p in passages:
            handle.write(json.dumps({"_id": p.id, "title": p.title, "text": p.text}) + "\n")
    with open(folder / "queries.jsonl", "w") as queries, open(folder / "qrels" / "test.tsv", "w") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for task in read_kilt_tasks(files.tasks, limit=max_queries):
            queries.write(json.dumps({"_id": task.id, "text": task.input}) + "\n")
            for pid in span_index.gold_passage_ids(task.provenance):
                qrels.write(f"{task.id}\t{pid}\t1\n")
    print(f"wrote {len(passages)} passages and {max_queries} queries to {folder}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--make-from-sample", type=Path, metavar="DIR")
    parser.add_argument("--stores", default="in_memory,elasticsearch")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument(
        "--methods", default="bm25,dense,hybrid", help="comma-separated retrieval methods (bm25 alone: no embeddings)"
    )
    parser.add_argument(
        "--analyzer", default="english", choices=("english", "standard"), help="store.analyzer of both stores"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/retrieval_quality.json"))
    args = parser.parse_args()
    if args.make_from_sample:
        make_from_sample(args.make_from_sample)
        return 0
    if not args.folder:
        parser.error("give a BEIR folder (or --make-from-sample DIR)")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    corpus, queries, qrels = read_beir(args.folder, args.max_queries)
    print(f"{args.folder}: {len(corpus)} passages, {len(queries)} judged queries")
    results = {}
    es_url = os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200")
    for store in args.stores.split(","):
        tmp = tempfile.mkdtemp(prefix="beir-")
        # each store type reads its own keys: the in-memory store a file to save to, Elasticsearch a node and an index
        store_sections = {
            "in_memory": {"persist_path": f"{tmp}/index.json"},
            "elasticsearch": {"hosts": es_url, "index": f"icr2-beir-{args.folder.name.lower()}-{args.analyzer}"},
        }
        config = index_config_from_dict(
            {
                "name": f"beir-{args.folder.name}",
                "store": {"type": store, "analyzer": args.analyzer, **store_sections.get(store, {})},
                # not read: build() is given the BEIR documents; the section is required, and this is its default
                "corpus": {"path": "sample"},
                "writer": {"checkpoint_path": f"{tmp}/checkpoint.json"},
                "embedding": {"enabled": methods != ["bm25"]},
            }
        )
        handle = IndexHandle(config)
        start = time.perf_counter()
        handle.build(progress=True, documents=iter(corpus))
        print(f"{store}: indexed {handle.count()} passages in {time.perf_counter() - start:.1f}s")
        for method in methods:
            ndcgs, recalls = [], []
            for query_id, text in tqdm(queries.items(), desc=f"{store}/{method}", unit=" q"):
                ranked = [d.id for d in handle.retrieve(text, method=method, top_k=100)]
                ndcgs.append(ndcg_at_k(ranked, qrels[query_id]))
                recalls.append(recall_at_k(ranked, qrels[query_id]))
            results[f"{store}/{method}"] = {
                "ndcg@10": sum(ndcgs) / len(ndcgs),
                "recall@100": sum(recalls) / len(recalls),
                "queries": len(ndcgs),
            }
        if store == "elasticsearch":
            handle.document_store.client.indices.delete(index=config.store.index, ignore_unavailable=True)
    print(f"\n{'store/method':<28}{'nDCG@10':>10}{'recall@100':>12}")
    for key, value in results.items():
        print(f"{key:<28}{value['ndcg@10']:>10.3f}{value['recall@100']:>12.3f}")
    if "in_memory/bm25" in results and "elasticsearch/bm25" in results:
        gap = results["in_memory/bm25"]["ndcg@10"] - results["elasticsearch/bm25"]["ndcg@10"]
        print(
            f"BM25 nDCG@10 in-memory minus Elasticsearch: {gap:+.4f} (analyzer {args.analyzer}, {len(queries)} queries)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"folder": str(args.folder), "analyzer": args.analyzer, "results": results}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
