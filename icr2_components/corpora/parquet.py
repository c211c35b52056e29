"""``corpus.format: parquet``: a Parquet file, or a folder of them (read in sorted order), columns mapped by
``corpus.fields``.

Read in record batches with pyarrow (the ``formats`` extra), only the mapped columns, so memory holds one batch
whatever the file's size; a column keeps its type (an integer stays an integer; a whole float in the id or title,
what an integer column with a null becomes in pandas, is read as the integer). Counted, named and skipped: the
record checks every tabular format shares (missing, null or empty text, a missing or repeated id:
:class:`~icr2_components.corpora.records.RecordMapper`) and, in a folder, a file pyarrow cannot read
(``unreadable file``), a file without the mapped columns (``Parquet file of another schema``, with its columns:
the other files are read), a file that is not a regular file or whose name is not UTF-8. A single file that
cannot be read is an error naming it; a table without the mapped text or id column (a folder: every file), or
naming a column twice, is an error naming its columns.

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: parquet
  path: passages.parquet          # or a folder of .parquet files
  fields: {id: id, title: title, text: text, meta: [lang]}
```
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings, missing_columns
from icr2_components.corpora.settings import ConfigError
from icr2_components.extras import require_extra
from icr2_components.paths import folder_entry_problem
from icr2_components.records.csv_rows import check_header
from icr2_components.records.reading import CorpusReadError

BATCH_ROWS = 1024


@dataclass
class ParquetCorpusSettings(TableCorpusSettings):
    format: str = "parquet"


@register_corpus_reader("parquet")
class ParquetCorpusReader(CorpusReader):
    settings_class = ParquetCorpusSettings
    settings: ParquetCorpusSettings

    def files(self) -> list[Path]:
        """The Parquet files read, in sorted order; in a folder, a file that is not a regular file (a FIFO, a
        socket) or whose name is not UTF-8 is counted and named instead (call after :meth:`reset`)."""
        path = self.path()
        if not path.is_dir():
            return [path]
        found = []
        for file in sorted(path.rglob("*.parquet")):
            relative = file.relative_to(path).as_posix()
            problem = folder_entry_problem(file, relative)
            if problem is not None:
                reason, detail = problem
                self.skips.skip(reason, None, detail)
                continue
            if file.is_dir():
                continue  # a folder named *.parquet: its files are found by rglob
            found.append(file)
        return found

    def documents(self) -> Iterator[Document]:
        require_extra("formats", "corpus.format: parquet", ("pyarrow",))
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.reset()
        mapper = RecordMapper(self.settings, self.skips)
        files = self.files()
        single = not self.path().is_dir()
        row = 0
        other_schema: list[tuple[Path, ConfigError]] = []
        read_any = False
        for file in files:
            try:
                table = pq.ParquetFile(file)
                columns = table.schema_arrow.names
            except (pa.ArrowException, OSError) as error:
                if single:
                    raise CorpusReadError(f"{file} cannot be read as Parquet ({error}).") from error
                self.skips.skip("unreadable file", None, f"{file.name}: {str(error)[:120]}")
                continue
            try:
                check_header(list(columns), str(file), ConfigError)
                missing_columns(self.settings, columns, str(file))
            except ConfigError as error:
                if single:
                    raise
                # a file of another table in the folder: named, and the files of this one are still read
                other_schema.append((file, error))
                self.skips.skip("Parquet file of another schema", None,
                                f"{file.relative_to(self.path()).as_posix()}: columns {columns}")
                continue
            read_any = True
            wanted = [name for name in self.settings.read_fields() if name in columns]
            try:
                for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
                    for record in batch.to_pylist():
                        row += 1
                        if self.at_limit():
                            return
                        passages = mapper.documents(record, row)
                        if passages:
                            self.records_read += 1
                            yield from passages
            except (pa.ArrowException, OSError) as error:
                # a damaged row group: what came before it was read (the same on every read, so a resume agrees)
                if single:
                    raise CorpusReadError(f"{file} is damaged after row {row} ({error}).") from error
                self.skips.skip("unreadable file", None, f"{file.name} after row {row}: {str(error)[:120]}")
        if other_schema and not read_any:
            # no file of the folder has the mapped columns: the mapping, not the files, is wrong
            raise other_schema[0][1]
