"""``corpus.format: csv``: a CSV file with a header row, columns mapped by ``corpus.fields``.

Read row by row with Python's ``csv`` module (quoted fields may span lines). Counted and skipped: a row with
another number of fields than the header (``row does not match the header``), a row the ``csv`` module cannot
parse, a row holding bytes that are not UTF-8 (``not UTF-8``), and the record checks every tabular format shares
(:class:`~icr2_components.corpora.records.RecordMapper`: missing or empty text, a missing or repeated id). An
empty cell is a missing value. A header without the mapped text or id column is an error naming the columns.

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: csv
  path: passages.csv
  delimiter: ","
  fields: {id: id, title: title, text: text, meta: [url]}
```
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from typing import Iterator

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings, missing_columns
from icr2_components.corpora.settings import ConfigError
from icr2_components.records.reading import _check_compression


@dataclass
class CsvCorpusSettings(TableCorpusSettings):
    format: str = "csv"
    delimiter: str = ","

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError(f"corpus.delimiter must be one character, got {self.delimiter!r}.")

    def validate_path(self) -> None:
        if self.resolved_path().is_dir():
            raise ConfigError(f"corpus.path {self.path} is a directory; give the CSV file (format: csv).")


def _has_surrogate(values: list[str]) -> bool:
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


@register_corpus_reader("csv")
class CsvCorpusReader(CorpusReader):
    settings_class = CsvCorpusSettings
    settings: CsvCorpusSettings

    def documents(self) -> Iterator[Document]:
        self.reset()
        path = self.path()
        if _check_compression(path):
            raise ConfigError(f"{path} is gzip-compressed; corpus.format: csv reads plain CSV (decompress it first).")
        mapper = RecordMapper(self.settings, self.skips)
        # a passage may be long: the csv module's default limit (128 KiB a field) would refuse it; restored after
        limit = csv.field_size_limit()
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
        try:
            # undecodable bytes become lone surrogates (surrogateescape), so one bad row is counted, not fatal
            with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
                rows = csv.reader(handle, delimiter=self.settings.delimiter)
                header = next(rows, None)
                if header is None:
                    return
                header = [name.strip() for name in header]
                missing_columns(self.settings, header, f"{path} (header)")
                width = len(header)
                while not self.at_limit():
                    try:
                        row = next(rows)
                    except StopIteration:
                        break
                    except csv.Error as error:
                        self.skips.skip("unparsable CSV row", rows.line_num, str(error)[:100])
                        continue
                    line = rows.line_num
                    if not row or not any(cell.strip() for cell in row):
                        continue  # a blank line is no record
                    if len(row) != width:
                        self.skips.skip("row does not match the header", line, f"{len(row)} fields, header {width}")
                        continue
                    if _has_surrogate(row):
                        self.skips.skip("not UTF-8", line)
                        continue
                    record = {name: (cell if cell != "" else None) for name, cell in zip(header, row)}
                    passages = mapper.documents(record, line)
                    if passages:
                        self.records_read += 1
                        yield from passages
        finally:
            csv.field_size_limit(limit)
