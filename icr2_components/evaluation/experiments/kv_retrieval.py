"""Lost in the Middle's synthetic key-value retrieval (section 4, figure 10): the examples, and the asked pair moved
to each position the paper reports.

The examples are the paper's released files (``kv-retrieval-75_keys.jsonl.gz``, ``kv-retrieval-140_keys.jsonl.gz``:
500 each, ``ordered_kv_records`` as ``[key, value]`` pairs, the asked ``key`` and its ``value``). For a position the
asked pair is taken out of the object and put back at that place, the other pairs keeping their order, as the
paper's experiment does (its figure 9).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from icr2_components.errors import UserInputError

# 1-based positions of the asked pair plotted in figure 10, per object size
PAPER_POSITIONS: dict[int, tuple[int, ...]] = {
    75: (1, 25, 50, 75),
    140: (1, 35, 70, 105, 140),
    300: (1, 50, 100, 150, 200, 250, 300),
}


@dataclass(frozen=True)
class KeyValueExample:
    """One example: the object's pairs in the released order, the asked key and its value; ``line`` is the 1-based
    line of the file it came from."""

    pairs: tuple[tuple[str, str], ...]
    key: str
    value: str
    line: int

    def at_position(self, position: int) -> list[list[str]]:
        """The pairs with the asked one moved to ``position`` (1-based), the others in their order."""
        if not isinstance(position, int) or isinstance(position, bool) or not 1 <= position <= len(self.pairs):
            raise UserInputError(f"position must be an integer in 1..{len(self.pairs)} for an object of "
                                 f"{len(self.pairs)} pairs, got {position!r}.")
        others = [list(pair) for pair in self.pairs if pair[0] != self.key]
        others.insert(position - 1, [self.key, self.value])
        return others


def kv_retrieval_file(keys: int, data_dir: str | os.PathLike | None = None) -> Path:
    """The released file for objects of ``keys`` pairs in ``data_dir`` (default: the shared data folder)."""
    from icr2_components.kilt.sample import shared_data_dir

    folder = Path(data_dir) if data_dir is not None else shared_data_dir()
    path = folder / f"kv-retrieval-{keys}_keys.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there: the key-value retrieval examples for {keys} pairs are the "
                                "paper's released files (kv-retrieval-<keys>_keys.jsonl.gz) in the data folder.")
    return path


def read_kv_examples(path: str | os.PathLike, limit: int | None = None) -> Iterator[KeyValueExample]:
    """The examples of a released file (gzip or plain JSONL), in file order; a record that is not a well-formed
    example (the key not among the pairs once, its value not the pair's) is an error naming its line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        count = 0
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if limit is not None and count >= limit:
                return
            try:
                record = json.loads(line)
                pairs = tuple((str(k), str(v)) for k, v in record["ordered_kv_records"])
                key, value = str(record["key"]), str(record["value"])
            except (ValueError, KeyError, TypeError) as error:
                raise UserInputError(f"{path}:{line_number}: not a key-value example ({error}).") from error
            matches = [v for k, v in pairs if k == key]
            if matches != [value]:
                raise UserInputError(f"{path}:{line_number}: the asked key is among the pairs {len(matches)} time(s) "
                                     "or its value differs from the record's `value`.")
            count += 1
            yield KeyValueExample(pairs, key, value, line_number)
