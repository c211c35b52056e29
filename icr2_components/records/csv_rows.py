"""Reading a CSV table strictly, row by row: the one CSV reader of the package (corpora and question sets).

Python's ``csv`` module in strict mode, over the file's lines with their numbers, so that no row is swallowed
and every bad one is named:

- a quote that is opened and not closed (the ``csv`` module would read on to the next quote or the end of the
  file, taking the rows between into one cell) is found where the parse fails (the end of the file, a character
  after a closing quote, a record over :data:`MAX_RECORD_LINES` lines or :data:`MAX_RECORD_CHARS` characters):
  the record that opened it is skipped as ``unclosed quote`` naming its first line, and reading goes on at the
  line after it, so the rows it had taken are read as rows;
- a one-line row the parser refuses (``"a"b``) is ``malformed CSV row``;
- a row with another number of cells than the header is ``row does not match the header``;
- a row holding bytes that are not UTF-8 is ``not UTF-8``.

The header is checked: an empty file, or a header naming a column twice, is an error naming the file and the
column. A blank line is no record; an empty cell is a missing value (None). Cells are text, as written.

Usage:
    >>> from icr2_components.records import SkipReport
    >>> from icr2_components.records.csv_rows import csv_records
    >>> skips = SkipReport(source="passages.csv")
    >>> for line, record in csv_records("passages.csv", skips):
    ...     record["text"]
"""

from __future__ import annotations

import csv
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from icr2_components.records.reading import CorpusReadError
from icr2_components.records.skips import SkipReport

#: a record (a row with its quoted line breaks) longer than this many lines is taken for an unclosed quote
MAX_RECORD_LINES = 100_000
#: ... or longer than this many characters (64 Mi: far above any passage, far below the memory of a machine)
MAX_RECORD_CHARS = 64 * 1024 * 1024


class _Runaway(Exception):
    """A record grew past the limits: a quote that was opened and not closed."""


def _has_surrogate(values: list[str]) -> bool:
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def duplicate_columns(header: list[str]) -> dict[str, list[int]]:
    """The names the header gives more than one column: ``{name: [1-based column numbers]}``. Columns without a
    name (the trailing empty columns a spreadsheet exports) are no name: no mapping can read them."""
    places: dict[str, list[int]] = {}
    for number, name in enumerate(header, start=1):
        if name:
            places.setdefault(name, []).append(number)
    return {name: numbers for name, numbers in places.items() if len(numbers) > 1}


def check_header(header: list[str], where: str, error: type[Exception] = CorpusReadError) -> None:
    """Refuse a header (CSV, or a Parquet schema's names) that names a column twice: a reader by name would keep
    one of the two and drop the other without a word."""
    repeated = duplicate_columns(header)
    if repeated:
        name, numbers = next(iter(repeated.items()))
        raise error(f"{where}: the header names column {name!r} {len(numbers)} times (columns "
                    f"{', '.join(map(str, numbers))}); rename the columns so that each name is used once.")


def csv_records(
    path: str | os.PathLike,
    skips: SkipReport,
    delimiter: str = ",",
    *,
    error: type[Exception] = CorpusReadError,
    on_header: Callable[[list[str]], None] | None = None,
    max_record_lines: int = MAX_RECORD_LINES,
    max_record_chars: int = MAX_RECORD_CHARS,
) -> Iterator[tuple[int, dict[str, str | None]]]:
    """``(line number, {column: cell or None})`` of every usable row of a CSV file with a header, in file order;
    the others are counted and named in ``skips`` (module docstring).

    :param error: the error class raised for the header (an empty file, a repeated name, an unclosed quote in it).
    :param on_header: called with the header (names stripped) before any row, e.g. to refuse a missing column.
    :raises error: as above, naming the file.
    """
    path = Path(path)
    # undecodable bytes become lone surrogates (surrogateescape), so one bad row is counted, not fatal
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        pending: deque[tuple[int, str]] = deque()  # lines to read again (after an unclosed quote), with numbers
        current: list[tuple[int, str]] = []  # the lines of the record being parsed
        read = [0]  # lines taken from the file so far

        def lines() -> Iterator[str]:
            size = 0
            while True:
                if pending:
                    number, text = pending.popleft()
                else:
                    text = handle.readline()
                    if not text:
                        return
                    read[0] += 1
                    number = read[0]
                if not current:
                    size = 0
                current.append((number, text))
                size += len(text)
                if len(current) > max_record_lines or size > max_record_chars:
                    raise _Runaway(f"it runs over {len(current)} lines ({size} characters)")
                yield text

        limit = csv.field_size_limit()
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # the record limits above bound a field
        try:
            reader = csv.reader(lines(), delimiter=delimiter, strict=True)
            current.clear()
            try:
                header = next(reader, None)
            except (csv.Error, _Runaway) as failure:
                raise error(f"{path}: the header (line 1) cannot be read as CSV ({failure}); fix its quotes and "
                            "run again.") from None
            if header is None:
                raise error(f"{path} is empty: a CSV table needs a header row naming its columns.")
            header = [name.strip() for name in header]
            check_header(header, str(path), error)
            if on_header is not None:
                on_header(header)
            width = len(header)
            while True:
                current.clear()
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except (csv.Error, _Runaway) as failure:
                    first = current[0][0] if current else read[0]
                    if len(current) > 1:
                        # a quote opened in this record ran on over the lines after it: skip the record, read
                        # those lines again as the rows they are
                        last = current[-1][0]
                        skips.skip("unclosed quote", first, f"a quote opened in the row starting on line {first} "
                                   f"is not closed before line {last} ({failure}); the lines after it are read "
                                   "as rows")
                        pending.extendleft(reversed(current[1:]))
                    elif "end of data" in str(failure):  # the last line opens a quote
                        skips.skip("unclosed quote", first, f"a quote opened on line {first} is not closed before "
                                   "the end of the file")
                    else:
                        skips.skip("malformed CSV row", first, str(failure)[:120])
                    reader = csv.reader(lines(), delimiter=delimiter, strict=True)
                    continue
                line = current[0][0] if current else read[0]
                if not row:
                    continue  # a blank line is no record
                if len(row) != width:
                    skips.skip("row does not match the header", line, f"{len(row)} cells, header {width}")
                    continue
                if _has_surrogate(row):
                    skips.skip("not UTF-8", line)
                    continue
                yield line, {name: (cell if cell != "" else None) for name, cell in zip(header, row, strict=True)}
        finally:
            csv.field_size_limit(limit)


__all__ = ["MAX_RECORD_CHARS", "MAX_RECORD_LINES", "check_header", "csv_records", "duplicate_columns"]
