"""Dev/test discipline for ``icr2 compare``: a seeded, deterministic split of a dataset's question ids, and
question-id files (what a run used, what the next run should use).

**The split.** Each question id is hashed with the seed (SHA-256 of ``"icr2-split/<seed>/<id>"``, read as a
number in [0, 1)); with ``dev_fraction`` the id goes to *dev* when that number is below the fraction, else to
*test*. An id's side depends only on the id and the seed, never on the other ids or their order, so the split is
stable when the file grows or is reordered: a question once in test stays in test. With ``dev_count`` instead,
the ``dev_count`` ids with the smallest numbers are dev; exact in size, but stable only for a fixed set of ids
(a new id with a small number moves the largest dev id to test), which the tuned pipeline's recorded dev ids
then catch (``run_compare`` refuses a tuned pipeline on its dev questions). Both sides keep dataset order.

**Question-id files.** One id per line; blank lines and ``#`` comments (a line starting with ``#``, or text
after `` #``) are ignored. A repeated id is refused (with its line numbers): a run uses each question once.
Ids that are not in the dataset are returned apart by :func:`resolve_question_ids` so callers count and report
them; they are never dropped silently.

Usage:
    >>> from icr2_components.evaluation.compare.splits import split_question_ids, write_question_ids, read_question_ids
    >>> split = split_question_ids(["q1", "q2", "q3", "q4"], seed=0, dev_fraction=0.5)
    >>> split.dev, split.test                     # disjoint, covering every id, in the given order
    >>> write_question_ids("runs/dev.txt", split.dev, comments=["dev split, seed 0"])
    >>> read_question_ids("runs/dev.txt") == split.dev
    True
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SPLITS = ("dev", "test")
DEFAULT_DEV_FRACTION = 0.2
DEFAULT_SPLIT_SEED = 0


class QuestionIdFileError(ValueError):
    """A question-id file that cannot be used as it is (missing, empty, repeated ids); the message says where."""


def split_value(question_id: str, seed: int) -> float:
    """The id's position in [0, 1) under ``seed``: the first 8 bytes of SHA-256("icr2-split/<seed>/<id>")."""
    digest = hashlib.sha256(f"icr2-split/{int(seed)}/{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class DatasetSplit:
    """The dev and test ids of one split (dataset order), and how it was made."""

    dev: list[str]
    test: list[str]
    seed: int
    dev_fraction: float | None = None
    dev_count: int | None = None

    def ids(self, name: str) -> list[str]:
        if name not in SPLITS:
            raise ValueError(f"A split is one of {list(SPLITS)}, got {name!r}.")
        return self.dev if name == "dev" else self.test

    def describe(self) -> dict:
        rule = {"dev_fraction": self.dev_fraction} if self.dev_count is None else {"dev_count": self.dev_count}
        return {"seed": self.seed, **rule, "dev": len(self.dev), "test": len(self.test),
                "method": "sha256('icr2-split/<seed>/<id>') < dev_fraction" if self.dev_count is None
                else "the dev_count ids with the smallest sha256('icr2-split/<seed>/<id>')"}


def split_question_ids(ids: Sequence[str], seed: int = DEFAULT_SPLIT_SEED, dev_fraction: float | None = None,
                       dev_count: int | None = None) -> DatasetSplit:
    """Split ``ids`` into dev and test (module docstring); give ``dev_fraction`` or ``dev_count``, not both
    (neither: :data:`DEFAULT_DEV_FRACTION`). Repeated ids are refused."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"The split seed must be an integer, got {seed!r}.")
    if dev_fraction is not None and dev_count is not None:
        raise ValueError("Give the dev split as a fraction or as a count, not both.")
    if dev_count is None and dev_fraction is None:
        dev_fraction = DEFAULT_DEV_FRACTION
    if dev_fraction is not None and not 0.0 < float(dev_fraction) < 1.0:
        raise ValueError(f"The dev fraction must be strictly between 0 and 1, got {dev_fraction!r}.")
    ids = [str(i) for i in ids]
    repeated = repeated_ids(ids)
    if repeated:
        raise ValueError(f"Question ids must be unique to be split; repeated: {repeated[:5]}"
                         f"{' ...' if len(repeated) > 5 else ''} ({len(repeated)} in all).")
    values = {i: split_value(i, seed) for i in ids}
    if dev_count is not None:
        if isinstance(dev_count, bool) or not isinstance(dev_count, int) or not 0 < dev_count < len(ids):
            raise ValueError(f"The dev count must be an integer between 1 and {len(ids) - 1} (the ids less one), "
                             f"got {dev_count!r}.")
        chosen = set(sorted(ids, key=lambda i: (values[i], i))[:dev_count])
    else:
        chosen = {i for i in ids if values[i] < dev_fraction}
    return DatasetSplit(dev=[i for i in ids if i in chosen], test=[i for i in ids if i not in chosen], seed=seed,
                        dev_fraction=None if dev_count is not None else float(dev_fraction), dev_count=dev_count)


def repeated_ids(ids: Iterable[str]) -> list[str]:
    """Ids that occur more than once, in order of their second occurrence."""
    seen: set[str] = set()
    repeated: list[str] = []
    for i in ids:
        if i in seen and i not in repeated:
            repeated.append(i)
        seen.add(i)
    return repeated


def ids_hash(ids: Sequence[str]) -> str:
    """SHA-256 (first 16 hex digits) of the ids in order, one per line: equal hashes, identical question lists."""
    return hashlib.sha256("".join(f"{i}\n" for i in ids).encode("utf-8")).hexdigest()[:16]


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (first 16 hex digits), read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _strip_comment(line: str) -> str:
    if line.lstrip().startswith("#"):
        return ""
    for marker in (" #", "\t#"):
        if marker in line:
            line = line.split(marker, 1)[0]
    return line.strip()


def read_question_ids(path: str | os.PathLike) -> list[str]:
    """The ids of a question-id file, in file order (module docstring for the format)."""
    path = Path(path)
    if not path.is_file():
        raise QuestionIdFileError(f"Question-id file not found: {path}. Write one id per line (a run's "
                                  "question_ids.txt is one).")
    ids: list[str] = []
    lines: dict[str, list[int]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        question_id = _strip_comment(line)
        if question_id:
            ids.append(question_id)
            lines.setdefault(question_id, []).append(number)
    if not ids:
        raise QuestionIdFileError(f"{path} lists no question id (one per line; # starts a comment).")
    repeated = {i: n for i, n in lines.items() if len(n) > 1}
    if repeated:
        shown = "; ".join(f"{i!r} on lines {', '.join(map(str, n))}" for i, n in list(repeated.items())[:3])
        raise QuestionIdFileError(f"{path} repeats {len(repeated)} question id(s) ({shown}"
                                  f"{'; ...' if len(repeated) > 3 else ''}); list each question once.")
    return ids


def write_question_ids(path: str | os.PathLike, ids: Sequence[str], comments: Sequence[str] = ()) -> Path:
    """Write ``ids`` one per line after ``comments`` (each as a ``#`` line); refuses repeated or blank ids and
    ids a reader would not read back (leading ``#``, `` #`` inside, line breaks)."""
    ids = [str(i) for i in ids]
    repeated = repeated_ids(ids)
    if repeated:
        raise ValueError(f"Cannot write repeated question ids: {repeated[:5]}.")
    for question_id in ids:
        if _strip_comment(question_id) != question_id or not question_id or "\n" in question_id or "\r" in question_id:
            raise ValueError(f"Question id {question_id!r} cannot be written one per line (blank, surrounding "
                             "spaces, a line break or a `#` comment marker).")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for text in comments for line in str(text).splitlines() or [""])
    path.write_text(header + "".join(f"{i}\n" for i in ids), encoding="utf-8")
    return path


@dataclass
class ResolvedIds:
    """Requested ids matched against a dataset: ``found`` (request order) and ``unknown`` (not in the dataset)."""

    found: list[str]
    unknown: list[str] = field(default_factory=list)

    def describe(self, examples: int = 10) -> dict:
        return {"requested": len(self.found) + len(self.unknown), "found": len(self.found),
                "unknown": len(self.unknown), "unknown_examples": self.unknown[:examples]}


def resolve_question_ids(requested: Sequence[str], available: Sequence[str]) -> ResolvedIds:
    """Split ``requested`` into the ids ``available`` has (in requested order) and the unknown ones."""
    known = set(available)
    return ResolvedIds(found=[i for i in requested if i in known], unknown=[i for i in requested if i not in known])
