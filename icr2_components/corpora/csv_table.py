"""``corpus.format: csv``: a CSV file with a header row, columns mapped by ``corpus.fields``.

Read row by row by the package's strict CSV reader (:func:`~icr2_components.records.csv_rows.csv_records`;
quoted fields may span lines). Counted, named and skipped: a quote opened and never closed (``unclosed quote``:
that row only, the rows after it are read), a row the parser refuses (``malformed CSV row``), a row with another
number of fields than the header (``row does not match the header``), a row holding bytes that are not UTF-8
(``not UTF-8``), and the record checks every tabular format shares
(:class:`~icr2_components.corpora.records.RecordMapper`: missing or empty text, a missing or repeated id). An
empty cell is a missing value. A header without the mapped text or id column, or naming a column twice, is an
error naming the columns.

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

from collections.abc import Iterator
from dataclasses import dataclass

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings, missing_columns
from icr2_components.corpora.settings import ConfigError
from icr2_components.records.csv_rows import csv_records
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
        rows = csv_records(path, self.skips, self.settings.delimiter, error=ConfigError,
                           on_header=lambda header: missing_columns(self.settings, header, f"{path} (header)"))
        while not self.at_limit():  # checked before the next row is read, so none past the limit is counted
            item = next(rows, None)
            if item is None:
                return
            line, record = item
            passages = mapper.documents(record, line)
            if passages:
                self.records_read += 1
                yield from passages
