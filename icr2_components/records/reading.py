"""Reading data files line by line: plain or gzip, UTF-8 decoded per line, bad lines counted, never fatal.

Every JSON-lines reader in the package (knowledge source, task files, benchmarks, evaluation and demonstration
files) goes through :func:`iter_lines` / :func:`iter_jsonl`, so one bad byte or one malformed record costs that
line only, counted in a :class:`~icr2_components.records.skips.SkipReport`. A file that cannot be read at all
(named ``.gz`` but not gzip, a gzip stream cut short) is a :class:`CorpusReadError` naming the file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from icr2_components.paths import special_file_kind
from icr2_components.records.skips import SkipReport

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"


class CorpusReadError(ValueError):
    """A data file cannot be read at all (not gzip though named .gz, cut short); the message names the file."""


def _is_gzip(path: Path) -> bool:
    kind = special_file_kind(path)
    if kind is not None:  # opening a FIFO waits for a writer, a device may never end: refused before the open
        raise CorpusReadError(f"{path} is {kind}, not a regular file; give the data file itself.")
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def _check_compression(path: Path) -> bool:
    """True for gzip content. A ``.gz`` name on a file that is not gzip is an error, not a traceback later."""
    gzipped = _is_gzip(path)
    if path.suffix == ".gz" and not gzipped:
        raise CorpusReadError(
            f"{path} is named .gz but is not gzip-compressed (it does not start with the gzip signature 1f 8b); "
            "rename it without .gz if it is plain JSON lines, or re-download it."
        )
    return gzipped


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a plain or gzip-compressed UTF-8 text file (a leading byte-order mark is dropped).

    Gzip is recognised by its signature, whatever the name; a ``.gz`` file that is not gzip is a
    :class:`CorpusReadError`.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such file: {path}")
    if _check_compression(path):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def iter_lines(path: str | os.PathLike, skips: SkipReport) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every non-blank line, decoding each line on its own.

    A line that is not valid UTF-8 is counted (with its line number and byte offset) and skipped; the lines
    after it are read as usual, so one bad byte in a 35 GB dump costs one article, not the load. A UTF-8
    byte-order mark on the first line is dropped. A gzip file cut short raises :class:`CorpusReadError`
    naming the last line read (what was read before it has been yielded).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No such file: {path}")
    opener = gzip.open if _check_compression(path) else open
    line_number = 0
    with opener(path, "rb") as handle:
        try:
            for raw in handle:
                line_number += 1
                if line_number == 1 and raw.startswith(UTF8_BOM):
                    raw = raw[len(UTF8_BOM):]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    skips.skip("not UTF-8", line_number, f"byte {error.start} of the line is 0x{raw[error.start]:02x}")
                    continue
                if text.strip():
                    yield line_number, text
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise CorpusReadError(
                f"{path}: the gzip stream is damaged after line {line_number} ({type(error).__name__}: {error}); "
                "the lines before it were read. Re-download or re-compress the file."
            ) from error


def lone_surrogate_path(value: Any, where: str = "") -> str | None:
    """Where ``value`` (a decoded JSON value) holds a string with a lone UTF-16 surrogate (``"\\ud800"`` in
    JSON): the key path such as ``text[3]``, or None. Such a string is not valid Unicode: a tokenizer, an UTF-8
    encoder or Elasticsearch's client refuses it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the value"
        return None
    if isinstance(value, dict):
        items = ((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for item_where, item in items:
        found = lone_surrogate_path(item, item_where)
        if found is not None:
            return found
    return None


def iter_jsonl(path: str | os.PathLike, skips: SkipReport) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every valid JSON object line; count the rest (bad UTF-8, bad JSON,
    JSON that is not an object, a string holding a lone surrogate escape such as ``"\\ud800"``) in ``skips``."""
    for line_number, line in iter_lines(path, skips):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            skips.skip("malformed JSON", line_number, str(error))
            continue
        if not isinstance(record, dict):
            skips.skip("not a JSON object", line_number)
            continue
        # only a \u escape can decode to a surrogate (iter_lines' UTF-8 decoding refuses encoded ones): the walk
        # over the record is paid only by lines that hold one
        if "\\u" in line:
            where = lone_surrogate_path(record)
            if where is not None:
                skips.skip("lone surrogate escape (not valid Unicode)", line_number, f"in {where}")
                continue
        yield line_number, record
