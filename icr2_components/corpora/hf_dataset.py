"""``corpus.format: hf_dataset``: a Hugging Face ``datasets`` dataset saved with ``save_to_disk``, or local data
files (JSON lines, CSV, Parquet, a file, a folder or a glob) read by ``datasets``, streamed; columns mapped by
``corpus.fields``.

Nothing is loaded into memory whole: a saved dataset is memory-mapped Arrow read as an ``IterableDataset``
(``to_iterable_dataset()``), data files are read with ``load_dataset(..., streaming=True)`` (no Arrow cache is
written), so a corpus larger than memory loads. Both give the rows in the same order on every read, which is what
an Elasticsearch load's resume relies on. Counted and skipped: the record checks every tabular format shares
(missing, null or empty text, a missing or repeated id: :class:`~icr2_components.corpora.records.RecordMapper`).
A data file ``datasets`` cannot parse is an error naming it (``datasets`` reads a file whole or not at all; to
skip bad lines one by one read JSON lines with ``format: jsonl``). Needs the ``formats`` extra (``datasets``).

Usage (``indexing/*.yaml``):

```yaml
corpus:
  format: hf_dataset
  path: my_dataset_dir            # save_to_disk output; or data/*.parquet, passages.jsonl, passages.csv
  split: train                    # for a DatasetDict or data files (default: the only split, or train)
  fields: {id: id, title: title, text: text}
```
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document

from icr2_components.corpora.reader import CorpusReader, data_identity, register_corpus_reader
from icr2_components.corpora.records import RecordMapper, TableCorpusSettings, missing_columns
from icr2_components.corpora.settings import ConfigError
from icr2_components.extras import require_extra
from icr2_components.records.reading import CorpusReadError

# data file suffixes -> the `datasets` builder that reads them
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet",
            ".jsonl.gz": "json", ".json.gz": "json", ".csv.gz": "csv"}


@dataclass
class HfDatasetCorpusSettings(TableCorpusSettings):
    format: str = "hf_dataset"
    # the split of a saved DatasetDict or of data files (null: the only split of a DatasetDict, else train)
    split: str | None = None

    def validate(self) -> None:
        super().validate()
        if self.split is not None and not self.split.strip():
            raise ConfigError("corpus.split must name a split (e.g. train) or be null.")


def _saved_kind(path: Path) -> str | None:
    """``dataset`` / ``dataset_dict`` for a ``save_to_disk`` folder, else None."""
    if not path.is_dir():
        return None
    if (path / "dataset_dict.json").exists():
        return "dataset_dict"
    if (path / "state.json").exists() and (path / "dataset_info.json").exists():
        return "dataset"
    return None


def _builder_for(files: list[str]) -> str:
    builders = set()
    for file in files:
        name = file.lower()
        builder = next((b for suffix, b in BUILDERS.items() if name.endswith(suffix)), None)
        if builder is None:
            raise ConfigError(
                f"corpus.format: hf_dataset cannot tell how to read {file}: data files must end in "
                f"{', '.join(sorted(BUILDERS))}, or be a save_to_disk folder."
            )
        builders.add(builder)
    if len(builders) > 1:
        raise ConfigError(f"corpus.path mixes data file kinds ({sorted(builders)}); give files of one kind.")
    return builders.pop()


@register_corpus_reader("hf_dataset")
class HfDatasetCorpusReader(CorpusReader):
    settings_class = HfDatasetCorpusSettings
    settings: HfDatasetCorpusSettings

    def data_files(self) -> list[str]:
        """The data files read (sorted), for a path that is not a saved dataset."""
        path = self.source_path()
        text = str(path)
        if any(ch in text for ch in "*?["):
            files = sorted(glob.glob(text, recursive=True))
        elif path.is_dir():
            files = sorted(str(p) for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.exists():
            files = [text]
        else:
            raise FileNotFoundError(f"corpus.path {path} does not exist (corpus.format: hf_dataset).")
        if not files:
            raise FileNotFoundError(f"corpus.path {path} matches no data file (corpus.format: hf_dataset).")
        return files

    def _rows(self) -> tuple[Any, list[str], str]:
        """The rows as an ``IterableDataset``, its columns, and what it is (for messages)."""
        require_extra("formats", "corpus.format: hf_dataset", ("datasets",))
        import datasets

        path = self.source_path()
        kind = _saved_kind(path)
        split = self.settings.split
        if kind is not None:
            loaded = datasets.load_from_disk(str(path))
            if kind == "dataset_dict":
                names = list(loaded.keys())
                if split is None:
                    if len(names) != 1:
                        raise ConfigError(f"{path} is a DatasetDict with splits {names}: choose one with corpus.split.")
                    split = names[0]
                if split not in loaded:
                    raise ConfigError(f"{path} has no split {split!r}; its splits are {names}.")
                loaded = loaded[split]
            elif split is not None:
                raise ConfigError(f"{path} is a single saved Dataset (no splits): leave corpus.split out.")
            return loaded.to_iterable_dataset(), list(loaded.column_names), f"saved dataset {path}"
        files = self.data_files()
        builder = _builder_for(files)
        try:
            rows = datasets.load_dataset(builder, data_files={split or "train": files}, split=split or "train",
                                         streaming=True)
        except (ValueError, FileNotFoundError) as error:
            raise CorpusReadError(f"datasets cannot open {path} ({error}).") from error
        return rows, list(rows.column_names or []), f"{builder} data files {path}"

    def documents(self) -> Iterator[Document]:
        self.reset()
        rows, columns, what = self._rows()
        if columns:
            missing_columns(self.settings, columns, what)
        mapper = RecordMapper(self.settings, self.skips)
        position = 0
        iterator = iter(rows)
        while not self.at_limit():
            try:
                record = next(iterator)
            except StopIteration:
                break
            except Exception as error:  # datasets' parse errors have no common class
                raise CorpusReadError(
                    f"datasets could not read {what} after row {position} ({type(error).__name__}: "
                    f"{str(error)[:300]}); datasets reads a data file whole, so use corpus.format: jsonl (or csv) "
                    "to count and skip bad lines one by one."
                ) from error
            position += 1
            passages = mapper.documents(record, position)
            if passages:
                self.records_read += 1
                yield from passages

    def data_key(self) -> Any:
        if self.source_path().exists():
            return data_identity(self.source_path())
        return [data_identity(Path(file)) for file in self.data_files()]  # a glob
