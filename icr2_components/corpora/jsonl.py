"""``corpus.format: jsonl``: one JSON object a line (plain or gzip), fields mapped by ``corpus.fields``.

Read line by line (memory stays flat), each line decoded on its own: a line that is not UTF-8 or not a JSON
object, or that holds a lone surrogate escape, is counted and skipped (:func:`~icr2_components.records.iter_jsonl`),
and so is a record whose text is missing or empty, or whose id is missing or repeated
(:class:`~icr2_components.corpora.records.RecordMapper`).

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: jsonl
  path: my_passages.jsonl
  fields: {id: doc_id, title: name, text: body, meta: [source, year]}
  # chunking: {split_by: word, split_length: 100, split_overlap: 0}   # default: each record one passage
```
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings
from icr2_components.corpora.settings import ConfigError
from icr2_components.records.reading import iter_jsonl


@dataclass
class JsonlCorpusSettings(TableCorpusSettings):
    format: str = "jsonl"

    def validate_path(self) -> None:
        if self.resolved_path().is_dir():
            raise ConfigError(f"corpus.path {self.path} is a directory; give the JSON-lines file (format: jsonl).")


@register_corpus_reader("jsonl")
class JsonlCorpusReader(CorpusReader):
    settings_class = JsonlCorpusSettings
    settings: JsonlCorpusSettings

    def documents(self) -> Iterator[Document]:
        self.reset()
        path = self.path()
        mapper = RecordMapper(self.settings, self.skips)
        for line_number, record in iter_jsonl(path, self.skips):
            if self.at_limit():
                return
            passages = mapper.documents(record, line_number)
            if passages:
                self.records_read += 1
                yield from passages
