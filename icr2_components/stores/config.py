"""Index configuration (``indexing/*.yaml``), validated strictly: an unknown key is an error, not a no-op."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from icr2_components.strict_mapping import dataclass_from_mapping

STORE_TYPES = ("in_memory", "elasticsearch")


class ConfigError(ValueError):
    """A configuration file or mapping is invalid; the message names the key and what is allowed."""


@dataclass
class StoreConfig:
    type: str = "in_memory"
    # in_memory: where the store is saved so that `icr2 search` in another process finds it
    persist_path: str | None = None
    # elasticsearch
    hosts: str | list[str] = "http://127.0.0.1:9200"
    index: str = "icr2-kilt"
    request_timeout: float = 60.0
    max_retries: int = 3
    bm25_k1: float = 0.9
    bm25_b: float = 0.4

    def validate(self) -> None:
        if self.type not in STORE_TYPES:
            raise ConfigError(f"store.type must be one of {STORE_TYPES}, got {self.type!r}.")
        if self.type == "elasticsearch" and not self.hosts:
            raise ConfigError("store.hosts is required for an Elasticsearch store (e.g. http://127.0.0.1:9200).")
        if self.max_retries < 0:
            raise ConfigError("store.max_retries must be >= 0.")


@dataclass
class CorpusConfig:
    # a KILT knowledge-source file, or "sample" for the bundled sample built from shared/data
    path: str = "sample"
    passage_words: int = 100
    skip_title_paragraph: bool = True
    max_articles: int | None = None

    def validate(self) -> None:
        if self.passage_words < 1:
            raise ConfigError(f"corpus.passage_words must be >= 1, got {self.passage_words}.")
        if self.max_articles is not None and self.max_articles < 1:
            raise ConfigError("corpus.max_articles must be a positive integer or null.")


@dataclass
class EmbeddingConfig:
    enabled: bool = True
    model: str = "all-minilm-l6-v2"
    batch_size: int = 64
    # Embeds "title\ncontent", as DPR does.
    meta_fields_to_embed: list[str] = field(default_factory=lambda: ["title"])
    device: str | None = None

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("embedding.batch_size must be >= 1.")


@dataclass
class WriterConfig:
    batch_size: int = 500
    # Elasticsearch: a JSON file recording how far a load got, so an interrupted run resumes
    checkpoint_path: str | None = None
    # bulk requests in flight at once (Elasticsearch)
    thread_count: int = 2
    max_chunk_bytes: int = 50 * 1024 * 1024

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ConfigError("writer.batch_size must be >= 1.")
        if self.thread_count < 1:
            raise ConfigError("writer.thread_count must be >= 1.")


@dataclass
class IndexConfig:
    store: StoreConfig = field(default_factory=StoreConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    name: str = "index"

    def validate(self) -> "IndexConfig":
        for section in (self.store, self.corpus, self.embedding, self.writer):
            section.validate()
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTIONS = {"store": StoreConfig, "corpus": CorpusConfig, "embedding": EmbeddingConfig, "writer": WriterConfig}


def _build_section(name: str, cls, values: Any, source: str):
    return dataclass_from_mapping(cls, values, f"section '{name}' of {source}", ConfigError)


# Sections a config must spell out: without them a typo'd file would silently index the bundled sample into the
# cache. `embedding` and `writer` have safe defaults (MiniLM on; 500 per batch).
REQUIRED_SECTIONS = ("store", "corpus")


def index_config_from_dict(data: dict[str, Any], source: str = "config") -> IndexConfig:
    """Validate a config mapping: known keys only, each value of its declared type, ``store`` and ``corpus``
    present (an empty ``corpus: {}`` is how to ask for the defaults, i.e. the bundled sample)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections {sorted(_SECTIONS)}.")
    allowed = set(_SECTIONS) | {"name"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; allowed top-level keys: {sorted(allowed)}.")
    name = data.get("name", "index")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{source}: key 'name' is {name!r}; expected a non-empty string.")
    sections = {section: _build_section(section, cls, data.get(section), source) for section, cls in _SECTIONS.items()}
    config = IndexConfig(name=name, **sections).validate()
    missing = [name for name in REQUIRED_SECTIONS if name not in data]
    if missing:
        raise ConfigError(
            f"{source}: no {' or '.join(repr(m) for m in missing)} section. Say where the index lives "
            "(store: {type: in_memory} or {type: elasticsearch, hosts: ..., index: ...}) and what to index "
            "(corpus: {path: <kilt_knowledgesource.json>} or {path: sample} for the bundled sample); see indexing/kilt-sample.yaml."
        )
    return config


def load_index_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> IndexConfig:
    """Load ``indexing/<name>.yaml``; ``overrides`` maps dotted keys (``store.index``) to values."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Index config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where} ({problem}); fix the file (indexing/kilt-sample.yaml is a working example).") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); save the config as UTF-8.") from error
    if data is None:
        raise ConfigError(f"{path} is empty; an index config needs at least the 'store' and 'corpus' sections (see indexing/kilt-sample.yaml).")
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            data[section] = value
        else:
            if not isinstance(data.get(section), dict):
                data[section] = {}
            data[section][key] = value
    return index_config_from_dict(data, source=str(path))
