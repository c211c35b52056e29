"""An exclusive lock on a file, for work done once into the cache that two processes may start at once.

Two processes (pytest workers, a CLI run beside a test run) may convert the same model, merge the same adapter or
export the same sentence encoder at the same time; each such step holds this lock on ``<target>.lock`` and checks
again, inside it, whether the other process finished the work first.

Usage:
    >>> with file_lock(target.with_suffix(".lock")):
    ...     if not (target / "config.json").exists():
    ...         build(target)
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder) for the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


__all__ = ["file_lock"]
