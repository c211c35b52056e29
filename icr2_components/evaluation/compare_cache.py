"""The per-question cache of ``icr2 compare``: one JSON line per (pipeline file hash, question id, context type).

Lines are appended and flushed as each answer arrives, so an interrupted run loses at most the answer being
generated; a re-run reads the file and skips every key already answered (records with an ``error`` are retried).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def cache_key(pipeline_hash: str, question_id: str, context_type: str) -> str:
    return f"{pipeline_hash}|{question_id}|{context_type}"


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
