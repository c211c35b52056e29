"""Corpus readers: the formats users have, one registered reader per file, each yielding Haystack ``Document``
passages into the same indexing path (resume, checkpoints, count check, counted skips).

``corpus.format`` of an index config names the reader: ``kilt`` (the default: the KILT knowledge source),
``jsonl``, ``csv``, ``parquet``, ``hf_dataset`` (a ``datasets`` dataset saved to disk, or data files, streamed),
``folder`` (.txt, .md, .html, .pdf through Haystack's converters) and ``existing`` (an index used as it is). A new
format is one :class:`CorpusReader` subclass decorated with :func:`register_corpus_reader`.

Usage:
    >>> from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
    >>> settings = corpus_settings_from_mapping({"format": "csv", "path": "passages.csv"}, "example")
    >>> reader = corpus_reader(settings)
    >>> for document in reader.documents():
    ...     ...
    >>> print(reader.skips.summary())
"""

from __future__ import annotations

from typing import Any

from icr2_components.corpora import (  # noqa: F401 (importing a reader registers its format)
    csv_table,
    existing,
    folder,
    hf_dataset,
    jsonl,
    kilt,
    parquet,
)
from icr2_components.corpora.reader import (
    CorpusReader,
    UnknownCorpusFormatError,
    corpus_reader,
    corpus_reader_class,
    register_corpus_reader,
)
from icr2_components.corpora.records import TableCorpusSettings
from icr2_components.corpora.settings import ChunkingSettings, ConfigError, CorpusConfig, FieldMapping
from icr2_components.strict_mapping import dataclass_from_mapping

#: the keys only the KILT format reads
KILT_ONLY_KEYS = ("passage_words", "skip_title_paragraph")


def corpus_settings_from_mapping(values: Any, source: str = "config") -> CorpusConfig:
    """The ``corpus:`` section as the settings of the reader its ``format`` names (default ``kilt``), every key
    type-checked (an unknown key is an error listing the format's keys) and validated."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"section 'corpus' of {source} must be a mapping such as {{path: ...}}, got {values!r}.")
    name = values.get("format", "kilt")
    try:
        reader = corpus_reader_class(name)
    except UnknownCorpusFormatError as error:
        raise ConfigError(f"{source}: corpus.format: {error}") from None
    if name != "kilt":
        given = [key for key in KILT_ONLY_KEYS if key in values]
        if given:
            raise ConfigError(
                f"{source}: corpus.{given[0]} is the KILT format's (DPR's rule); corpus.format {name} is cut into "
                "passages by corpus.chunking: {split_by: word, split_length: 100, split_overlap: 0}."
            )
    settings = dataclass_from_mapping(
        reader.settings_class, values, f"section 'corpus' (format {name}) of {source}", ConfigError
    )
    settings.validate()
    return settings


__all__ = [
    "ChunkingSettings",
    "CorpusConfig",
    "CorpusReader",
    "FieldMapping",
    "TableCorpusSettings",
    "UnknownCorpusFormatError",
    "corpus_reader",
    "corpus_settings_from_mapping",
    "register_corpus_reader",
]
