"""Validation CiC instances for probing: from an ICR2 benchmark JSONL, or built from the bundled NQ sample.

The benchmark file (``icr2 build-benchmark``) is the normal source. :func:`nq_sample_instances` builds the
same kind of instance directly from the sample (gold passages + BM25 confounders, assembled by
``ConfounderAwareCorpusBuilder``) for tests and benches that should not depend on a built file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

from haystack import Document

from icr2_components.probing.head_probing import CiCInstance
from icr2_components.records import SkipReport


def instance_from_benchmark_record(record: dict) -> CiCInstance:
    """One ICR2-format record -> a :class:`CiCInstance` (documents keep the record's passage ids and origins)."""
    missing = [key for key in ("id", "query", "context", "gold_passage_ids") if key not in record]
    if missing:
        raise ValueError(f"missing fields {missing}")
    documents = []
    for passage in record["context"]:
        meta = {key: passage.get(key) for key in ("passage_id", "doc_id", "title", "origin")}
        documents.append(Document(id=str(passage.get("doc_id") or passage["passage_id"]), content=passage["text"], meta=meta))
    return CiCInstance(
        id=str(record["id"]),
        query=record["query"],
        documents=documents,
        gold_passage_ids=[str(pid) for pid in record["gold_passage_ids"]],
        task_type=record.get("task_type", "qa"),
        answers=list(record.get("answers") or []),
    )


def read_benchmark_instances(path: str | os.PathLike, skips: SkipReport | None = None) -> Iterator[CiCInstance]:
    """Stream CiC instances from an ICR2 benchmark JSONL; malformed records are counted in ``skips``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Benchmark file not found: {path}. Build one with `icr2 build-benchmark`.")
    skips = skips if skips is not None else SkipReport(source=str(path))
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield instance_from_benchmark_record(json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                skips.skip("malformed record", line_number, str(error))


def nq_sample_instances(count: int, passages: int = 5, seed: int = 0, offset: int = 0) -> list[CiCInstance]:
    """``count`` NQ questions of the bundled sample as CiC instances of ``passages`` passages each.

    The gold passages come from the task provenance; the confounders are the BM25 top hits over the sample
    corpus that neither overlap the gold span nor contain an answer (the corpus builder's checks), so the
    context is hard (ICR2 confounding ratio 1). Questions whose gold passage is not in the corpus are skipped.
    """
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.builders import ConfounderAwareCorpusBuilder
    from icr2_components.kilt import KiltKnowledgeSource, PassageSpanIndex, build_sample, read_kilt_tasks

    sample = build_sample()
    corpus = list(KiltKnowledgeSource(sample.corpus).documents())
    by_id = {document.id: document for document in corpus}
    spans = PassageSpanIndex.from_documents(corpus)
    store = InMemoryDocumentStore()
    store.write_documents(corpus)
    bm25 = InMemoryBM25Retriever(store, top_k=passages * 3)
    builder = ConfounderAwareCorpusBuilder(retrievers=["bm25"], confounding_ratio=1.0, budget_passages=passages, seed=seed)
    instances: list[CiCInstance] = []
    for task in read_kilt_tasks(sample.tasks):
        if offset:
            offset -= 1
            continue
        gold = [by_id[pid] for pid in spans.gold_passage_ids(task.provenance) if pid in by_id]
        if not gold:
            continue
        hits = bm25.run(query=task.input)["documents"]
        built = builder.run(query=task.input, answers=task.answers, gold_documents=gold[:1], bm25=hits)["documents"]
        if len(built) < 2:
            continue
        gold_ids = [d.meta["passage_id"] for d in built if d.meta.get("origin") == "gold"]
        instances.append(CiCInstance(task.id, task.input, built, gold_ids, "qa", list(task.answers)))
        if len(instances) >= count:
            break
    return instances
