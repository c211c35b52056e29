"""Index configuration (``indexing/*.yaml``), validated strictly: an unknown key is an error, not a no-op."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from icr2_components.corpora import corpus_reader, corpus_settings_from_mapping
from icr2_components.corpora.kilt import KiltCorpusSettings
from icr2_components.corpora.settings import ConfigError, CorpusConfig
from icr2_components.paths import output_file_problem
from icr2_components.stores.store_types import (
    StoreSettings,
    UnknownStoreBackendError,
    store_backend,
    store_backend_names,
)
from icr2_components.strict_mapping import (
    PathText,
    PositiveInt,
    PositiveNumber,
    at_key,
    check_fields,
    check_known_keys,
    dataclass_from_mapping,
    with_yaml_line,
)

# The store a config gets when its store section does not say `type` (the embedded one, nothing to start).
DEFAULT_STORE_TYPE = "in_memory"


@dataclass
class EmbeddingConfig:
    enabled: bool = True
    model: str = "all-minilm-l6-v2"
    batch_size: PositiveInt = 64
    # Embeds "title\ncontent", as DPR does.
    meta_fields_to_embed: list[str] = field(default_factory=lambda: ["title"])
    device: str | None = None
    # Embeddings at scale (icr2_components/models/sentence_backends.py, `icr2 embed`): fp32
    # (SentenceTransformer.encode),
    # onnx, onnx-int8 (ONNX Runtime; exported locally once) or openvino
    backend: str = "fp32"
    # one worker process per entry, e.g. [cuda:0, cuda:1] or [cpu, cpu] (null: encode in this process on `device`)
    devices: list[str] | None = None
    # worker processes per device (with `devices`) or on `device`; 1 and no `devices`: no pool
    processes: PositiveInt = 1
    # intra-op threads of ONNX Runtime / OpenVINO (and torch in pool workers) per process (null: their default)
    threads: PositiveInt | None = None
    # read passage vectors from the shards `icr2 embed CONFIG --out DIR` wrote, instead of computing them
    vectors_dir: PathText | None = None

    def validate(self) -> None:
        check_fields(self, "index config section 'embedding'", ConfigError)
        from icr2_components.stores.embedding import validate_embedding_settings

        validate_embedding_settings(self, ConfigError)


@dataclass
class WriterConfig:
    batch_size: PositiveInt = 500
    # Elasticsearch: a JSON file recording how far a load got, so an interrupted run resumes
    checkpoint_path: PathText | None = None
    # Elasticsearch: write the checkpoint every this many confirmed bulks, and at least every checkpoint_seconds,
    # so that a load killed at any moment redoes (re-embeds) only about that many seconds of work
    checkpoint_every: PositiveInt = 10
    checkpoint_seconds: PositiveNumber = 5.0
    # bulk requests in flight at once (Elasticsearch)
    thread_count: PositiveInt = 2
    max_chunk_bytes: PositiveInt = 50 * 1024 * 1024
    # Elasticsearch: replicas while the load runs: 0 (fastest; the index's own replicas are restored afterwards) or
    # null (keep them, so that a cluster which loses a node mid-load loses no written passage)
    load_replicas: Annotated[int, Field(ge=0, description="null keeps the index's replicas")] | None = 0
    # Elasticsearch: force-merge to this many segments per shard after a load whose count check passed (null: no
    # merge); an index loaded once and then read answers faster merged (bench/scale.py)
    force_merge_segments: Annotated[int, Field(ge=1, description="null: no merge")] | None = None

    def validate(self) -> None:
        check_fields(self, "index config section 'writer'", ConfigError)
        problem = output_file_problem(self.checkpoint_path) if self.checkpoint_path else None
        if problem:
            raise ConfigError(f"writer.checkpoint_path cannot be written: {problem}.")


def default_store_settings() -> StoreSettings:
    """The ``store:`` section of a config that says nothing about the store."""
    return store_backend(DEFAULT_STORE_TYPE).settings_class()


@dataclass
class IndexConfig:
    # the registered backend's own section (e.g. InMemoryStoreSettings, ElasticsearchStoreSettings)
    store: StoreSettings = field(default_factory=default_store_settings)
    # the reader's own section (e.g. KiltCorpusSettings, JsonlCorpusSettings: icr2_components.corpora)
    corpus: CorpusConfig = field(default_factory=KiltCorpusSettings)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    name: str = "index"

    def validate(self) -> IndexConfig:
        for section in (self.store, self.corpus, self.embedding, self.writer):
            section.validate()
        # a store section's checks that need the other sections (e.g. no vector index without embeddings)
        getattr(self.store, "validate_with_config", lambda config: None)(self)
        return self


# Sections read by this module; the store section is read by the backend its `type` names, the corpus section by
# the reader its `format` names (icr2_components.corpora).
_SECTIONS = {"embedding": EmbeddingConfig, "writer": WriterConfig}
_SECTION_NAMES = ("store", "corpus", *_SECTIONS)


def _build_section(name: str, cls, values: Any, source: str):
    with at_key(name):
        return dataclass_from_mapping(cls, values, f"section '{name}' of {source}", ConfigError)


def _build_store_section(values: Any, source: str) -> StoreSettings:
    """The store section as the settings of the backend its ``type`` names (default: in_memory)."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(
            f"section 'store' of {source} must be a mapping such as {{type: {DEFAULT_STORE_TYPE}}}, got {values!r}."
        )
    store_type = values.get("type", DEFAULT_STORE_TYPE)
    try:
        backend = store_backend(store_type)
    except UnknownStoreBackendError:
        raise ConfigError(
            f"{source}: store.type must be one of the registered store types ({', '.join(store_backend_names())}), got "
            f"{store_type!r}."
        ) from None
    with at_key("store"):
        return dataclass_from_mapping(
            backend.settings_class, values, f"section 'store' (type {store_type}) of {source}", ConfigError
        )


# Sections a config must spell out: without them a typo'd file would silently index the bundled sample into the
# cache. `embedding` and `writer` have safe defaults (MiniLM on; 500 per batch).
REQUIRED_SECTIONS = ("store", "corpus")


def index_config_from_dict(data: dict[str, Any], source: str = "config") -> IndexConfig:
    """Validate a config mapping: known keys only, each value of its declared type, ``store`` and ``corpus``
    present, and ``corpus.path`` spelled out (``path: sample`` is how to ask for the bundled sample)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections {sorted(_SECTION_NAMES)}.")
    with at_key(*sorted(set(data) - {*_SECTION_NAMES, "name"}, key=str)[:1]):
        check_known_keys(data, {*_SECTION_NAMES, "name"}, f"the top level of {source}", ConfigError)
    name = data.get("name", "index")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{source}: key 'name' is {name!r}; expected a non-empty string.")
    store = _build_store_section(data.get("store"), source)
    with at_key("corpus"):
        corpus = corpus_settings_from_mapping(data.get("corpus"), source)
    sections = {section: _build_section(section, cls, data.get(section), source) for section, cls in _SECTIONS.items()}
    config = IndexConfig(name=name, store=store, corpus=corpus, **sections).validate()
    missing = [name for name in REQUIRED_SECTIONS if name not in data]
    if missing:
        raise ConfigError(
            f"{source}: no {' or '.join(repr(m) for m in missing)} section. Say where the index lives "
            "(store: {type: in_memory} or {type: elasticsearch, hosts: ..., index: ...}) and what to index "
            "(corpus: {path: <kilt_knowledgesource.json>} or {path: sample} for the bundled sample); see "
            "indexing/kilt-sample.yaml."
        )
    # a corpus section without its path would index the bundled sample and exit 0: what was meant is unknown
    if config.corpus.reads_documents and (not isinstance(data["corpus"], dict) or "path" not in data["corpus"]):
        raise ConfigError(
            f"{source}: section 'corpus' has no 'path'. Say what to index: corpus: {{path: "
            "<kilt_knowledgesource.json>}, "
            "or {path: sample} for the bundled sample (see indexing/kilt-sample.yaml)."
        )
    return config


def load_index_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> IndexConfig:
    """Load an index config, by path or by shipped name (``kilt-sample``, ``kilt-sample-elasticsearch``);
    ``overrides`` maps dotted keys (``store.index``) to values."""
    from icr2_components.resources.lookup import resolve_file

    path = resolve_file("indexing", path)
    if not path.exists():
        raise FileNotFoundError(f"Index config not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(
            f"{path}: not valid YAML{where} ({problem}); fix the file (indexing/kilt-sample.yaml is a working example)."
        ) from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); save the config as UTF-8.") from error
    if data is None:
        raise ConfigError(
            f"{path} is empty; an index config needs at least the 'store' and 'corpus' sections (see "
            "indexing/kilt-sample.yaml)."
        )
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            data[section] = value
        else:
            if not isinstance(data.get(section), dict):
                data[section] = {}
            data[section][key] = value
    try:
        return index_config_from_dict(data, source=str(path))
    except ConfigError as error:  # the line of the key it names, when the file has that key
        located = with_yaml_line(error, text, str(path))
        if located is error:
            raise
        raise located from None


def corpus_path(config: IndexConfig) -> Path:
    """The file or folder the config's corpus reads (the bundled sample written first when asked for)."""
    path = config.corpus.resolved_path()
    if not path.exists():
        raise FileNotFoundError(f"corpus.path {path} does not exist (use 'sample' for the bundled sample).")
    return path


def config_fingerprint(config: IndexConfig) -> str:
    """Changes whenever the passages or their embeddings would change: the corpus reader's key (the data read,
    its size or listing, the format's settings and the chunking) and the embedding's settings. A KILT corpus
    chunked by DPR's rule keeps the fingerprint it had before corpus formats existed."""
    key = corpus_reader(config.corpus).fingerprint_key()
    key.update({
        "embedding": config.embedding.model if config.embedding.enabled else None,
        "meta_fields_to_embed": config.embedding.meta_fields_to_embed if config.embedding.enabled else None,
    })
    if config.embedding.enabled and config.embedding.backend != "fp32":
        key["embedding_backend"] = config.embedding.backend  # only when set: fp32 indexes keep their fingerprint
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
