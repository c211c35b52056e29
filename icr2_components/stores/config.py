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
    hosts: str = "http://127.0.0.1:9200"
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


def index_config_from_dict(data: dict[str, Any], source: str = "config") -> IndexConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections {sorted(_SECTIONS)}.")
    allowed = set(_SECTIONS) | {"name"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; allowed top-level keys: {sorted(allowed)}.")
    sections = {name: _build_section(name, cls, data.get(name), source) for name, cls in _SECTIONS.items()}
    try:
        config = IndexConfig(name=str(data.get("name", "index")), **sections)
    except TypeError as error:
        raise ConfigError(f"{source}: {error}") from error
    return config.validate()


def load_index_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> IndexConfig:
    """Load ``indexing/<name>.yaml``; ``overrides`` maps dotted keys (``store.index``) to values."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Index config not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            data[section] = value
        else:
            if not isinstance(data.get(section), dict):
                data[section] = {}
            data[section][key] = value
    return index_config_from_dict(data, source=str(path))
