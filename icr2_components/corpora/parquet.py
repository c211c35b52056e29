"""``corpus.format: parquet``: a Parquet file, or a folder of them (read in sorted order), columns mapped by
``corpus.fields``.

Read in record batches with pyarrow (the ``formats`` extra), only the mapped columns, so memory holds one batch
whatever the file's size. Counted and skipped: the record checks every tabular format shares (missing, null or
empty text, a missing or repeated id: :class:`~icr2_components.corpora.records.RecordMapper`) and, in a folder,
a file pyarrow cannot read (``unreadable file``). A single file that cannot be read is an error naming it; a
table without the mapped text or id column is an error naming its columns.

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: parquet
  path: passages.parquet          # or a folder of .parquet files
  fields: {id: id, title: title, text: text, meta: [lang]}
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings, missing_columns
from icr2_components.extras import require_extra
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
        path = self.path()
        if path.is_dir():
            return sorted(p for p in path.rglob("*.parquet") if p.is_file())
        return [path]

    def documents(self) -> Iterator[Document]:
        require_extra("formats", "corpus.format: parquet", ("pyarrow",))
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.reset()
        mapper = RecordMapper(self.settings, self.skips)
        files = self.files()
        single = len(files) == 1 and not self.path().is_dir()
        row = 0
        for file in files:
            try:
                table = pq.ParquetFile(file)
                columns = table.schema_arrow.names
            except (pa.ArrowException, OSError) as error:
                if single:
                    raise CorpusReadError(f"{file} cannot be read as Parquet ({error}).") from error
                self.skips.skip("unreadable file", None, f"{file.name}: {str(error)[:120]}")
                continue
            missing_columns(self.settings, columns, str(file))
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
