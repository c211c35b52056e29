"""Building small ICR2 training/validation files from the bundled NQ sample (smoke recipes, tests, the bench),
and CiC probing instances made from it (:func:`nq_sample_instances`).

It runs the same library function as ``icr2 build-benchmark`` (``build_icr2_benchmark`` over ``open_index``)
on a slice of the sample's questions. Nothing is written into the repository: callers give a temp or run dir.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icr2_components.filters.probing.head_probing import CiCInstance


def build_sample_benchmark(
    out_path: str | os.PathLike,
    limit: int,
    budget_passages: int = 4,
    offset: int = 0,
    retrievers: Sequence[str] = ("bm25",),
    index_config: str = "kilt-sample",
    seed: int = 0,
    progress: bool = False,
    question_ids: Collection[str] | None = None,
    top_k: int | None = None,
) -> dict:
    """Write ICR2 records for sample questions ``offset .. offset+limit`` (or, with ``question_ids``, exactly those
    questions, in sample order) to ``out_path``; return the summary. ``top_k``: candidates per retriever (default
    4 x the budget).

    Usage:
        >>> build_sample_benchmark("/tmp/train.jsonl", limit=16, budget_passages=3)
    """
    from icr2_components.builders.benchmark import build_icr2_benchmark
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup
    from icr2_components.kilt.tasks import read_kilt_tasks
    from icr2_components.stores import open_index
    from icr2_components.stores.config import corpus_path

    if limit < 1 or offset < 0 or budget_passages < 2:
        raise ValueError("build_sample_benchmark needs limit >= 1, offset >= 0 and budget_passages >= 2.")
    handle = open_index(index_config)  # a path, or a shipped config's name
    if question_ids is not None:
        wanted = set(question_ids)
        tasks = [task for task in read_kilt_tasks(build_sample().tasks) if task.id in wanted]
    else:
        tasks = list(itertools.islice(read_kilt_tasks(build_sample().tasks), offset, offset + limit))
    needed = {p.wikipedia_id for task in tasks for p in task.provenance}
    config = handle.config
    lookup = GoldPassageLookup.from_knowledge_source(corpus_path(config), wikipedia_ids=needed,
                                                     passage_words=config.corpus.passage_words)
    retrieve = {m: (lambda query, k, m=m: handle.retrieve(query, method=m, top_k=k)) for m in retrievers}
    summary = build_icr2_benchmark(tasks, retrieve, None, lookup, out_path, budget_passages=budget_passages,
                                   top_k=top_k or budget_passages * 4, seed=seed, progress=progress)
    return summary.as_dict()


def nq_sample_instances(count: int, passages: int = 5, seed: int = 0, offset: int = 0) -> list[CiCInstance]:
    """``count`` NQ questions of the bundled sample as CiC instances of ``passages`` passages each.

    The gold passages come from the task provenance; the confounders are the BM25 top hits over the sample
    corpus that neither overlap the gold span nor contain an answer (the corpus builder's checks), so the
    context is hard (ICR2 confounding ratio 1). Questions whose gold passage is not in the corpus are skipped.
    """
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.builders import ConfounderAwareCorpusBuilder
    from icr2_components.filters.probing.head_probing import CiCInstance
    from icr2_components.kilt import KiltKnowledgeSource, build_sample
    from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks

    sample = build_sample()
    corpus = list(KiltKnowledgeSource(sample.corpus).documents())
    by_id = {document.id: document for document in corpus}
    spans = PassageSpanIndex.from_documents(corpus)
    store = InMemoryDocumentStore()
    store.write_documents(corpus)
    bm25 = InMemoryBM25Retriever(store, top_k=passages * 3)
    builder = ConfounderAwareCorpusBuilder(
        retrievers=["bm25"], confounding_ratio=1.0, budget_passages=passages, seed=seed
    )
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
