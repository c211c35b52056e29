"""Counted skips: bad input never vanishes silently, it is counted by reason with example line numbers."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

_MAX_EXAMPLES = 5


@dataclass
class SkipReport:
    """Counts of skipped records by reason, with the first few line numbers of each."""

    source: str = ""
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, line_number: int | None = None, detail: str = "") -> None:
        self.counts[reason] += 1
        where = f"line {line_number}" if line_number is not None else "record"
        example = f"{where}: {detail}" if detail else where
        bucket = self.examples.setdefault(reason, [])
        if len(bucket) < _MAX_EXAMPLES:
            bucket.append(example)
        if self.counts[reason] <= _MAX_EXAMPLES:
            logger.warning("%s: skipped %s (%s)", self.source or "input", example, reason)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        return {"source": self.source, "total": self.total, "counts": dict(self.counts), "examples": self.examples}

    def summary(self) -> str:
        if not self.total:
            return f"{self.source or 'input'}: nothing skipped"
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.counts.items()))
        return f"{self.source or 'input'}: skipped {self.total} ({parts})"
