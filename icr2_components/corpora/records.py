"""Records of a table (a JSON line, a CSV row, a Parquet or ``datasets`` row) into passages, by a field mapping.

One place decides what a bad record is for every tabular format, so that they count alike: the text field
missing or null (``missing text field``), not a string (``text is not a string``), empty or blank (``empty
text``); the id field missing, null, empty or not a string or integer (a whole float, what an integer column with
a null becomes in pandas, is the integer: ``7.0`` is the id ``7``); a repeated id (the first record wins, as in the
KILT reader: a second record with the same id would overwrite the first one's passages). Metadata keeps its type
(a year stays the integer ``1969``).

Usage:
    >>> from icr2_components.corpora.records import RecordMapper, TableCorpusSettings
    >>> from icr2_components.records import SkipReport
    >>> mapper = RecordMapper(TableCorpusSettings(format="jsonl", path="x", fields={"text": "body"}), SkipReport())
    >>> mapper.documents({"id": 7, "body": "Some text.", "title": "T"}, position=1)[0].id
    '7'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

from icr2_components.corpora.chunking import Chunker
from icr2_components.corpora.settings import ChunkingSettings, ConfigError, CorpusConfig, FieldMapping
from icr2_components.kilt.seen_ids import SeenIds
from icr2_components.records import SkipReport
from icr2_components.strict_mapping import dataclass_from_mapping
from icr2_components.text.blank import is_blank


@dataclass
class TableCorpusSettings(CorpusConfig):
    """A corpus of records with named fields; ``fields`` maps them (defaults: ``id``, ``title``, ``text``)."""

    fields: FieldMapping = field(default_factory=FieldMapping)

    def validate(self) -> None:
        # built in Python rather than from YAML: the mappings read as a file's would be (unknown keys, strict types)
        if isinstance(self.fields, dict):
            self.fields = dataclass_from_mapping(FieldMapping, self.fields, "section 'corpus.fields'", ConfigError)
        if isinstance(self.chunking, dict):
            self.chunking = dataclass_from_mapping(ChunkingSettings, self.chunking, "section 'corpus.chunking'",
                                                   ConfigError)
        super().validate()
        self.fields.validate()

    def required_fields(self) -> list[str]:
        """The fields every record must have (a table without such a column cannot be read)."""
        return [name for name in (self.fields.id, self.fields.text) if name is not None]

    def read_fields(self) -> list[str]:
        """Every field the mapping reads."""
        names = [self.fields.id, self.fields.title, self.fields.text, *self.fields.meta]
        return list(dict.fromkeys(name for name in names if name is not None))


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value: Any) -> str:
    """A cell as text; a whole float as the integer it holds (``1969.0`` -> ``1969``: a year in an integer column
    with a null, which pandas writes as floats)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _meta_value(value: Any) -> Any:
    """A metadata value a store keeps: JSON scalars and lists as they are, anything else as its string."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_meta_value(v) for v in value]
    return str(value)


class RecordMapper:
    """Maps records to passages by ``settings.fields`` and ``settings.chunking``, counting bad records in
    ``skips`` and remembering ids (first one wins)."""

    def __init__(self, settings: TableCorpusSettings, skips: SkipReport) -> None:
        self.settings = settings
        self.fields = settings.fields
        self.skips = skips
        chunking = settings.effective_chunking()
        self.chunker = Chunker(chunking) if chunking is not None else Chunker(ChunkingSettings(split_by="none"))
        self.seen = SeenIds()

    def documents(self, record: Mapping[str, Any], position: int) -> list[Document]:
        """The passages of one record (``position``: its line or row number, from 1); [] when it is skipped."""
        fields = self.fields
        text = record.get(fields.text)
        if _is_missing(text):
            self.skips.skip("missing text field", position, f"no value in '{fields.text}'")
            return []
        if not isinstance(text, str):
            self.skips.skip("text is not a string", position, f"'{fields.text}' is {type(text).__name__}")
            return []
        if is_blank(text):  # white space or characters that print nothing (a zero-width space)
            self.skips.skip("empty text", position, f"'{fields.text}' is blank")
            return []
        if fields.id is None:
            record_id = str(position)
        else:
            raw_id = record.get(fields.id)
            if _is_missing(raw_id):
                self.skips.skip("missing id field", position, f"no value in '{fields.id}'")
                return []
            if isinstance(raw_id, float) and raw_id.is_integer():
                raw_id = int(raw_id)  # an integer column with a null, as pandas writes it: 7.0 is the id 7
            if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or not str(raw_id).strip():
                self.skips.skip("id is not a string or an integer", position, repr(raw_id)[:60])
                return []
            record_id = str(raw_id).strip()
        if not self.seen.add(record_id):
            self.skips.skip("duplicate id (first record kept)", position, f"id={record_id}")
            return []
        meta: dict[str, Any] = {}
        if fields.title is not None:
            title = record.get(fields.title)
            meta["title"] = "" if _is_missing(title) else _text(title)
        for name in fields.meta:
            if name in record and not _is_missing(record[name]):
                meta[name] = _meta_value(record[name])
        passages = self.chunker.split(Document(content=text, meta=meta), record_id)
        if not passages:
            self.skips.skip("empty text", position, f"id={record_id}: no passage after chunking")
        return passages


def missing_columns(settings: TableCorpusSettings, columns: list[str], where: str) -> None:
    """Refuse a table that lacks a column the mapping needs (every record would be skipped), naming its columns."""
    missing = [name for name in settings.required_fields() if name not in columns]
    if missing:
        raise ConfigError(
            f"{where} has no column {', '.join(repr(m) for m in missing)} (corpus.fields); its columns are "
            f"{columns}. Map them with corpus.fields: {{id: ..., title: ..., text: ...}} (id: null numbers the rows)."
        )


__all__ = ["RecordMapper", "TableCorpusSettings", "missing_columns"]
