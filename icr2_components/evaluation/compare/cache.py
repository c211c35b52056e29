"""The per-question cache of ``icr2 compare``: one JSON line per (pipeline hash, question id, context type).

Lines are appended and flushed as each answer arrives, so an interrupted run loses at most the answer being
generated; a re-run reads the file and skips every key already answered (records with an ``error`` are retried).

What a key covers, so that a resumed run never mixes answers to different inputs:

- the pipeline hash (``icr2_components.pipeline_spec.behaviour_hash``): the YAML's components, connections,
  inputs, outputs and context entry, and, for a pipeline that reads an index, the index config's contents and
  the stores' ``RETRIEVAL_BEHAVIOUR_VERSION`` (so open-retrieval answers follow the index), and, for a pipeline
  whose components read artifacts (a gate's ``artifact:``, probed heads), their contents (so a retrained gate or
  re-probed heads are answered again);
- the passages compare itself gives (the controlled ``gold``, ``conflicting``, ``irrelevant`` contexts, and the
  oracle's gold passages under ``open``) are not in the key: each record stores ``context_sha``
  (``context_sha``: ids and contents, in order), and a record whose ``context_sha`` differs from the context
  built now is ``stale_context`` (``reuse_decision``): re-answered, or left out by ``--report-only``. Records
  written before ``context_sha`` existed are reused but counted as ``context_unchecked``.

Usage:
    >>> from haystack import Document
    >>> from icr2_components.evaluation.compare.cache import context_sha, reuse_decision
    >>> sha = context_sha([Document(id="p1", content="Paris is the capital of France.")])
    >>> reuse_decision({"context_sha": sha}, sha), reuse_decision({}, sha), reuse_decision({"context_sha": "x"}, sha)
    ('reuse', 'context_unchecked', 'stale_context')
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

#: ``context_sha`` of a controlled context type that could not be built for a question (no passages given)
NO_CONTEXT = "none"
#: the reuse decisions (``reuse_decision``); the last two are also run counters
REUSE, STALE_CONTEXT, CONTEXT_UNCHECKED = "reuse", "stale_context", "context_unchecked"


def cache_key(pipeline_hash: str, question_id: str, context_type: str) -> str:
    return f"{pipeline_hash}|{question_id}|{context_type}"


def context_sha(documents: Sequence[Any] | None) -> str:
    """A short SHA-256 of the passages given (each one's id and content, in order); ``NO_CONTEXT`` for None."""
    if documents is None:
        return NO_CONTEXT
    material = json.dumps([[d.id, d.content] for d in documents], ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def reuse_decision(record: dict[str, Any], expected_sha: str | None) -> str:
    """Whether a finished cached ``record`` may stand for the context built now (``expected_sha``: its
    ``context_sha``, None where compare gives no passages, i.e. open retrieval): ``"reuse"``; ``"stale_context"``
    (recorded for other passages: re-answer it, or leave it out of a report-only run); or ``"context_unchecked"``
    (a record written before ``context_sha`` existed: reused, and counted so that it shows)."""
    if expected_sha is None:
        return REUSE
    if "context_sha" not in record or record["context_sha"] is None:
        return CONTEXT_UNCHECKED
    return REUSE if record["context_sha"] == expected_sha else STALE_CONTEXT


class AnswerCache:
    """Append-only JSONL of answer records keyed by ``cache_key``; the last record of a key wins."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self.unreadable_lines = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    self.records[record["key"]] = record
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.unreadable_lines += 1  # a line cut by an interruption: its answer is simply redone

    def done(self, key: str) -> bool:
        record = self.records.get(key)
        return record is not None and not record.get("error")

    def add(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
        self.records[record["key"]] = record

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records.values())


def read_answer_records(path: str | Path) -> list[dict[str, Any]]:
    """All current records of a cache file (for recomputing a report's numbers)."""
    return list(AnswerCache(path))
