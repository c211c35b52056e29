"""Counted skips: bad input never vanishes silently. Each skip is counted by reason and named: every one is kept
(:meth:`SkipReport.entries`, :meth:`SkipReport.write_jsonl`), and while a run's skip file is open
(:func:`skip_file`; the ``icr2`` command opens one for each run) every skip of every report is also written there
as it happens, one JSON line each. The console shows the first few of each reason.

Usage:
    >>> from icr2_components.records.skips import SkipReport, skip_file
    >>> with skip_file("runs/my-run/skips.jsonl") as log:
    ...     skips = SkipReport(source="passages.csv")
    ...     skips.skip("not UTF-8", 12, "byte 3 of the line is 0xff")
    >>> log.written, skips.counts["not UTF-8"]
    (1, 1)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

#: examples of each reason kept in :meth:`SkipReport.as_dict` and shown on the console
_MAX_EXAMPLES = 5
#: skips a report keeps in memory; the ones after them go to a temporary file (a dump with millions of bad lines)
_IN_MEMORY = 100_000


def printable(text: Any) -> str:
    """``text`` as a string that encodes as UTF-8: a byte kept by ``surrogateescape`` (a file name or a line that is
    not UTF-8) as ``\\xff``, any other lone surrogate as ``\\udXXX``."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(
            c if not "\ud800" <= c <= "\udfff"
            else (f"\\x{ord(c) - 0xdc00:02x}" if 0xdc80 <= ord(c) <= 0xdcff else f"\\u{ord(c):04x}")
            for c in text
        )


class SkipFile:
    """The run's skip file: every skip recorded while it is open, one JSON line each (``source``, ``reason``,
    ``line`` (None when the input has no lines: a file of a folder), ``detail``). Made at the first skip (the
    folders above it too); a skip recorded twice (an input read twice) is written once."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.written = 0
        self.counts: Counter = Counter()
        self._handle: IO[str] | None = None
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> bool:
        """Write ``entry`` unless it was written already; True when it is new."""
        line = json.dumps(entry, ensure_ascii=False)
        digest = hashlib.blake2b(line.encode("utf-8"), digest_size=8).digest()
        with self._lock:
            if digest in self._seen:
                return False
            self._seen.add(digest)
            if self._handle is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - kept open, closed by close()
            self._handle.write(line + "\n")
            self._handle.flush()
            self.written += 1
            self.counts[entry["reason"]] += 1
            return True

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def summary(self) -> str:
        """One line for the console: how many inputs were skipped, why, and where every one is named."""
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.counts.items()))
        return f"skipped {self.written} input(s) ({parts}); every one is named in {self.path}"


_ACTIVE: list[SkipFile] = []
_ACTIVE_LOCK = threading.Lock()


def active_skip_file() -> SkipFile | None:
    """The skip file open now (the innermost :func:`skip_file`), or None."""
    with _ACTIVE_LOCK:
        return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def skip_file(path: str | os.PathLike) -> Iterator[SkipFile]:
    """Write every skip of every :class:`SkipReport` to ``path`` while the block runs (threads included)."""
    log = SkipFile(path)
    with _ACTIVE_LOCK:
        _ACTIVE.append(log)
    try:
        yield log
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(log)
        log.close()


@dataclass
class SkipReport:
    """Counts of skipped records by reason, the first few of each (:attr:`examples`), and every one
    (:meth:`entries`)."""

    source: str = ""
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    _kept: list[tuple[str, int | None, str]] = field(default_factory=list, repr=False, compare=False)
    _spill: Any = field(default=None, repr=False, compare=False)

    def skip(self, reason: str, line_number: int | None = None, detail: str = "") -> None:
        """Count one skipped input, with its line (or None) and what was wrong, and name it."""
        detail = printable(detail)
        self.counts[reason] += 1
        where = f"line {line_number}" if line_number is not None else "record"
        example = f"{where}: {detail}" if detail else where
        bucket = self.examples.setdefault(reason, [])
        if len(bucket) < _MAX_EXAMPLES:
            bucket.append(example)
        if len(self._kept) < _IN_MEMORY:
            self._kept.append((reason, line_number, detail))
        else:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - kept across calls
            self._spill.write(json.dumps([reason, line_number, detail], ensure_ascii=False) + "\n")
        log = active_skip_file()
        entry = {"source": printable(self.source), "reason": reason, "line": line_number, "detail": detail}
        new = log.record(entry) if log is not None else True
        shown = log.counts[reason] if log is not None else self.counts[reason]
        if new and shown <= _MAX_EXAMPLES:
            logger.warning("%s: skipped %s (%s)", printable(self.source) or "input", example, reason)

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every skip in the order recorded: ``{"source", "reason", "line", "detail"}``."""
        source = printable(self.source)
        for reason, line, detail in self._kept:
            yield {"source": source, "reason": reason, "line": line, "detail": detail}
        if self._spill is not None:
            self._spill.flush()
            self._spill.seek(0)
            for text in self._spill:
                reason, line, detail = json.loads(text)
                yield {"source": source, "reason": reason, "line": line, "detail": detail}
            self._spill.seek(0, os.SEEK_END)

    def write_jsonl(self, path: str | os.PathLike) -> Path:
        """Write :meth:`entries` to ``path`` as JSON lines; returns the path."""
        path = Path(path)
        with open(path, "w", encoding="utf-8") as handle:
            for entry in self.entries():
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return path

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        """Counts and the first examples of each reason (every skip: :meth:`entries`, or the run's skip file)."""
        return {"source": self.source, "total": self.total, "counts": dict(self.counts), "examples": self.examples}

    def summary(self) -> str:
        if not self.total:
            return f"{self.source or 'input'}: nothing skipped"
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.counts.items()))
        return f"{self.source or 'input'}: skipped {self.total} ({parts})"
