"""Building small ICR2 training/validation files from the bundled NQ sample (smoke recipes, tests, the bench).

It runs the same library function as ``icr2 build-benchmark`` (``build_icr2_benchmark`` over ``open_index``)
on a slice of the sample's questions. Nothing is written into the repository: callers give a temp or run dir.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Sequence


def build_sample_benchmark(
    out_path: str | os.PathLike,
    limit: int,
    budget_passages: int = 4,
    offset: int = 0,
    retrievers: Sequence[str] = ("bm25",),
    index_config: str = "indexing/kilt-sample.yaml",
    seed: int = 0,
    progress: bool = False,
) -> dict:
    """Write ICR2 records for sample questions ``offset .. offset+limit`` to ``out_path``; return the summary.

    Usage:
        >>> build_sample_benchmark("/tmp/train.jsonl", limit=16, budget_passages=3)
    """
    from icr2_components.builders.benchmark import GoldPassageLookup, build_icr2_benchmark
    from icr2_components.kilt import build_sample, read_kilt_tasks
    from icr2_components.stores import open_index
    from icr2_components.stores.handle import corpus_path

    if limit < 1 or offset < 0 or budget_passages < 2:
        raise ValueError("build_sample_benchmark needs limit >= 1, offset >= 0 and budget_passages >= 2.")
    index_path = Path(index_config)
    if not index_path.exists():  # relative to the repository root when called from elsewhere
        index_path = Path(__file__).resolve().parents[2] / index_config
    handle = open_index(str(index_path))
    tasks = list(itertools.islice(read_kilt_tasks(build_sample().tasks), offset, offset + limit))
    needed = {p.wikipedia_id for task in tasks for p in task.provenance}
    config = handle.config
    lookup = GoldPassageLookup.from_knowledge_source(corpus_path(config), wikipedia_ids=needed,
                                                     passage_words=config.corpus.passage_words)
    retrieve = {m: (lambda query, k, m=m: handle.retrieve(query, method=m, top_k=k)) for m in retrievers}
    summary = build_icr2_benchmark(tasks, retrieve, None, lookup, out_path, budget_passages=budget_passages,
                                   top_k=budget_passages * 4, seed=seed, progress=progress)
    return summary.as_dict()
