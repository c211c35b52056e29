"""The ``corpus:`` section of an index config: the keys every corpus format shares, the field mapping of tabular
formats and the chunking setting.

A format (``corpus.format``) is one registered :class:`~icr2_components.corpora.reader.CorpusReader` with its own
settings dataclass, a subclass of :class:`CorpusConfig` (as a store type owns its ``store:`` section); the
index config reads the section through the registry, so an unknown key of that format is an error naming the
format's allowed keys.

Usage:
    >>> from icr2_components.corpora import corpus_settings_from_mapping
    >>> settings = corpus_settings_from_mapping(
    ...     {"format": "jsonl", "path": "docs.jsonl", "fields": {"id": "doc_id", "text": "body", "meta": ["year"]},
    ...      "chunking": {"split_by": "word", "split_length": 120, "split_overlap": 20}}, "my.yaml")
    >>> settings.fields.text, settings.chunking.split_length
    ('body', 120)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from icr2_components.errors import ConfigError
from icr2_components.models.resolver import SMOLLM2_ALIAS
from icr2_components.paths import cache_dir
from icr2_components.strict_mapping import NonNegativeInt, PathText, PositiveInt, check_fields

#: what ``{cache}`` in ``corpus.path`` stands for: the project's cache root (``ICR2_CACHE_DIR`` or
#: ``~/.cache/icr2_components``), where ``scripts/python_docs.sh`` unpacks the Python documentation
CACHE_PLACEHOLDER = "{cache}"

#: Haystack ``Document`` fields: a metadata field of that name would be written over the document's own
RESERVED_META = frozenset({"id", "content", "embedding", "sparse_embedding", "score", "blob", "meta"})

#: the ``split_by`` units of Haystack's ``DocumentSplitter`` a corpus may use, and ``none`` (a record is one passage)
SPLIT_UNITS = ("none", "word", "sentence", "passage", "period", "line", "page")


@dataclass
class ChunkingSettings:
    """How records are cut into passages: Haystack's ``DocumentSplitter`` (``split_by`` a unit: ``word``,
    ``sentence`` (NLTK's punkt_tab data must be installed), ``passage`` (blank-line separated), ``period``,
    ``line``, ``page`` (form feeds, as PDFs are read)), ``split_length`` units a passage, ``split_overlap`` units
    shared by neighbours; or ``split_by: none``: each record is one passage, as it is."""

    split_by: str = "word"
    split_length: PositiveInt = 100
    split_overlap: NonNegativeInt = 0

    def validate(self) -> None:
        check_fields(self, "section 'corpus.chunking'", ConfigError)
        if self.split_by not in SPLIT_UNITS:
            raise ConfigError(
                f"corpus.chunking.split_by must be one of {', '.join(SPLIT_UNITS)}, got {self.split_by!r}."
            )
        if not 0 <= self.split_overlap < self.split_length:
            raise ConfigError(
                f"corpus.chunking.split_overlap must be >= 0 and below split_length ({self.split_length}), got "
                f"{self.split_overlap}."
            )

    def tag(self) -> str:
        """The chunking in a passage id (``word100o0``), so that indexes chunked differently never share ids."""
        return f"{self.split_by}{self.split_length}o{self.split_overlap}"

    def as_key(self) -> dict:
        return {"split_by": self.split_by, "split_length": self.split_length, "split_overlap": self.split_overlap}


@dataclass
class FieldMapping:
    """Which field of a record holds what: ``text`` (required), ``id`` (null: the record's position in the
    file, from 1), ``title`` (null: none), and ``meta``, fields kept as the document's metadata (filters match
    them; an absent one is left out of that document's meta)."""

    id: str | None = "id"
    title: str | None = "title"
    text: str = "text"
    meta: list[str] = field(default_factory=list)

    def validate(self) -> None:
        for key in ("id", "title", "text"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"corpus.fields.{key} must name a field of the records, got {value!r}.")
        for name in self.meta:
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"corpus.fields.meta lists field names, got {name!r}.")
            if name in RESERVED_META or name in ("title", "passage_index"):
                raise ConfigError(
                    f"corpus.fields.meta names {name!r}, which a document already has (Haystack's Document fields "
                    f"{sorted(RESERVED_META)}, and title, passage_index); map it under another name."
                )
            if name in (self.id, self.text):
                raise ConfigError(f"corpus.fields.meta names {name!r}, the id or text field; it is stored already.")
        if len(set(self.meta)) != len(self.meta):
            raise ConfigError(f"corpus.fields.meta repeats a field: {self.meta}.")


@dataclass
class CorpusConfig:
    """The keys every format shares. ``format`` names the reader (default ``kilt``, today's KILT knowledge source);
    ``path`` is its file or folder (``{cache}`` stands for the project's cache root); ``max_articles`` caps the
    records read (articles, rows or files); ``chunking`` cuts records into passages (null: the format's own
    default). ``passage_words`` and ``skip_title_paragraph`` are the KILT format's (DPR's rule)."""

    #: the format whose reader this section is for (a registered name)
    format: str = "kilt"
    # a KILT knowledge-source file, or "sample" for the bundled sample built from shared/data; for other formats
    # their file or folder
    path: PathText = "sample"
    passage_words: PositiveInt = 100
    skip_title_paragraph: bool = True
    max_articles: PositiveInt | None = None
    # tokenizers whose cost of each passage is counted once at indexing and stored with it (meta token_counts),
    # so a token-budget corpus builder reads it instead of tokenizing (default: the bundled reader's; [] for none)
    count_tokens_for: list[str] = field(default_factory=lambda: [SMOLLM2_ALIAS])
    # how records are cut into passages; null: the format's default (KILT: DPR's rule of passage_words words)
    chunking: ChunkingSettings | None = None

    #: a format that reads no records (an index used as it is) sets this False
    reads_documents: ClassVar[bool] = True

    def validate(self) -> None:
        check_fields(self, "section 'corpus'", ConfigError)
        for name in self.count_tokens_for:
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(
                    f"corpus.count_tokens_for lists tokenizers (aliases, paths, Hugging Face ids), got {name!r}."
                )
        if len(set(self.count_tokens_for)) != len(self.count_tokens_for):
            raise ConfigError(f"corpus.count_tokens_for repeats a tokenizer: {self.count_tokens_for}.")
        if self.chunking is not None:
            self.chunking.validate()
        self.validate_path()

    def validate_path(self) -> None:
        """The format's check of ``path`` at config time (a missing file is reported when the corpus is opened)."""

    def resolved_path(self) -> Path:
        """``path`` with ``~`` and ``{cache}`` expanded (not checked for existence)."""
        return expand_path(self.path)

    def default_chunking(self) -> ChunkingSettings | None:
        """The chunking when ``chunking`` is null (None: the format's own rule, or records as they are)."""
        return None

    def effective_chunking(self) -> ChunkingSettings | None:
        return self.chunking if self.chunking is not None else self.default_chunking()


def expand_path(path: str | os.PathLike) -> Path:
    """``~`` and ``{cache}`` (the project's cache root) expanded."""
    text = str(path)
    if CACHE_PLACEHOLDER in text:
        text = text.replace(CACHE_PLACEHOLDER, str(cache_dir()))
    return Path(text).expanduser()


__all__ = [
    "CACHE_PLACEHOLDER",
    "RESERVED_META",
    "SPLIT_UNITS",
    "ChunkingSettings",
    "ConfigError",
    "CorpusConfig",
    "FieldMapping",
    "expand_path",
]
