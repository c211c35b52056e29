"""Validation CiC instances for probing, read from an ICR2 benchmark JSONL (``icr2 build-benchmark``).

Tests and benches that should not depend on a built file make the same kind of instance from the bundled NQ
sample with ``training.sample_data.nq_sample_instances`` (it runs the corpus builder, a sibling component,
so it lives above the components).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from haystack import Document

from icr2_components.filters.probing.head_probing import CiCInstance
from icr2_components.records import SkipReport


def instance_from_benchmark_record(record: dict) -> CiCInstance:
    """One ICR2-format record -> a :class:`CiCInstance` (documents keep the record's passage ids and origins)."""
    missing = [key for key in ("id", "query", "context", "gold_passage_ids") if key not in record]
    if missing:
        raise ValueError(f"missing fields {missing}")
    documents = []
    for passage in record["context"]:
        meta = {key: passage.get(key) for key in ("passage_id", "doc_id", "title", "origin")}
        documents.append(
            Document(id=str(passage.get("doc_id") or passage["passage_id"]), content=passage["text"], meta=meta)
        )
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
