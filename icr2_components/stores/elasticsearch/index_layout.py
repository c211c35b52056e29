"""How an Elasticsearch index is laid out for its size: shards, replicas, the vector index type, BM25-only.

The ``store:`` section of an Elasticsearch index config takes:

```yaml
store:
  type: elasticsearch
  shards: 6              # primary shards (static: fixed when the index is created)
  replicas: 1            # copies of each shard on other nodes (0 on one node)
  vector_index:          # the dense_vector field's ES 8 `index_options`; omitted: the node's default
    type: int8_hnsw      # hnsw (float32) | int8_hnsw | flat (float32, brute force) | int8_flat
    m: 16                # HNSW neighbours per node (hnsw types only)
    ef_construction: 100 # HNSW candidates while building (hnsw types only)
  vectors_in_source: false  # keep the vectors out of the stored _source (less disk; Documents come back without them)
embedding:
  enabled: false         # a BM25-only index: no vector field at all
```

This module turns that into the settings and mapping of the index (applied where the index is created,
:func:`~icr2_components.stores.elasticsearch.store.ensure_index`), reads back what the node reports for an
index, and lists the differences, so a test (or a user) can see the node holds what the config says.

Reference: Elasticsearch ``dense_vector`` ``index_options``
https://www.elastic.co/guide/en/elasticsearch/reference/8.19/dense-vector.html and "Tune approximate kNN search"
(memory per vector) https://www.elastic.co/guide/en/elasticsearch/reference/8.19/tune-knn-search.html

Usage:
    >>> from icr2_components.stores import load_index_config
    >>> from icr2_components.stores.elasticsearch.index_layout import IndexLayout
    >>> layout = IndexLayout.from_config(load_index_config("indexing/kilt-full-elasticsearch.yaml"))
    >>> layout.describe()
    'shards 8, replicas 1, vectors int8_hnsw (m 16, ef_construction 100), not in _source'
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icr2_components.stores.config import IndexConfig

logger = logging.getLogger(__name__)

# ES 8 `index_options.type` values this project configures; the hnsw ones take m / ef_construction.
HNSW_TYPES = ("hnsw", "int8_hnsw")
FLAT_TYPES = ("flat", "int8_flat")
VECTOR_INDEX_TYPES = HNSW_TYPES + FLAT_TYPES
# Lucene's limits on the HNSW graph (Lucene99HnswVectorsFormat: MAXIMUM_MAX_CONN, MAXIMUM_BEAM_WIDTH)
MAX_HNSW_M = 512
MAX_HNSW_EF_CONSTRUCTION = 3200
# Elasticsearch refuses more than 1024 primary shards per index (index.number_of_shards)
MAX_SHARDS = 1024
# What the node uses when a config says nothing: Elasticsearch 8.14+ indexes float vectors as int8_hnsw, m 16,
# ef_construction 100 (checked against the node in tests/test_index_layout.py)
NODE_DEFAULT_VECTOR_INDEX = {"type": "int8_hnsw", "m": 16, "ef_construction": 100}


def _config_error(message: str) -> Exception:
    from icr2_components.stores.config import ConfigError

    return ConfigError(message)


@dataclass
class VectorIndexSettings:
    """``store.vector_index``: the ``index_options`` of the ``embedding`` dense_vector field.

    :param type: ``hnsw`` (float32 graph), ``int8_hnsw`` (int8-quantised graph, float32 kept on disk for
        rescoring), ``flat`` (float32, exact brute-force search) or ``int8_flat``.
    :param m: HNSW neighbours per node (hnsw types only; Elasticsearch's default 16).
    :param ef_construction: HNSW candidate list while building (hnsw types only; default 100).
    """

    type: str = "int8_hnsw"
    m: int | None = None
    ef_construction: int | None = None

    def validate(self) -> None:
        if self.type not in VECTOR_INDEX_TYPES:
            raise _config_error(
                f"store.vector_index.type must be one of {', '.join(VECTOR_INDEX_TYPES)}, got {self.type!r}."
            )
        if self.type in FLAT_TYPES:
            given = [key for key in ("m", "ef_construction") if getattr(self, key) is not None]
            if given:
                raise _config_error(
                    f"store.vector_index.{given[0]} applies to the hnsw types only; a {self.type} index has no graph "
                    f"(remove it or use {self.type.replace('flat', 'hnsw')})."
                )
            return
        if self.m is not None and not 2 <= self.m <= MAX_HNSW_M:
            raise _config_error(
                f"store.vector_index.m must be between 2 and {MAX_HNSW_M} (Elasticsearch's default is 16), got "
                f"{self.m}."
            )
        if self.ef_construction is not None and not 1 <= self.ef_construction <= MAX_HNSW_EF_CONSTRUCTION:
            raise _config_error(
                f"store.vector_index.ef_construction must be between 1 and {MAX_HNSW_EF_CONSTRUCTION} (Elasticsearch's "
                f"default is 100), got {self.ef_construction}."
            )

    @property
    def is_hnsw(self) -> bool:
        return self.type in HNSW_TYPES

    def index_options(self) -> dict[str, Any]:
        """The ``index_options`` mapping Elasticsearch takes (m / ef_construction defaulted to 16 / 100)."""
        options: dict[str, Any] = {"type": self.type}
        if self.is_hnsw:
            options["m"] = self.m if self.m is not None else NODE_DEFAULT_VECTOR_INDEX["m"]
            options["ef_construction"] = (
                self.ef_construction
                if self.ef_construction is not None
                else NODE_DEFAULT_VECTOR_INDEX["ef_construction"]
            )
        return options


def validate_store_layout(shards: Any, replicas: Any, vector_index: VectorIndexSettings | None) -> None:
    """The checks of ``store.shards`` / ``store.replicas`` / ``store.vector_index``, each a one-line ConfigError."""
    if not 1 <= shards <= MAX_SHARDS:
        raise _config_error(f"store.shards must be between 1 and {MAX_SHARDS}, got {shards}.")
    if replicas < 0:
        raise _config_error(f"store.replicas must be >= 0 (0 on a single node), got {replicas}.")
    if vector_index is not None:
        vector_index.validate()


def validate_layout_against_config(config: IndexConfig) -> None:
    """Cross-section check: a vector index type on a config that embeds nothing is a mistake, not a no-op."""
    vector_index = getattr(config.store, "vector_index", None)
    if getattr(config.store, "vectors_in_source", True) is False and not config.embedding.enabled:
        raise _config_error(
            "store.vectors_in_source is false but embedding.enabled is false: a BM25-only index has no vectors to "
            "leave out. Remove store.vectors_in_source, or set embedding.enabled: true."
        )
    if vector_index is not None and not config.embedding.enabled:
        raise _config_error(
            f"store.vector_index is set ({vector_index.type}) but embedding.enabled is false: a BM25-only index has no "
            "vector field. Remove store.vector_index, or set embedding.enabled: true."
        )


@dataclass(frozen=True)
class IndexLayout:
    """The layout an index config asks for; :meth:`apply` puts it into the settings and mapping of a new index.

    :param shards: primary shards.
    :param replicas: replicas of each shard.
    :param vectors: False for a BM25-only index (no ``embedding`` field in the mapping).
    :param vector_index: the ``index_options`` type and HNSW parameters; None leaves them to the node
        (``int8_hnsw``, m 16, ef_construction 100 on Elasticsearch 8.14 and later).
    :param vectors_in_source: False excludes the ``embedding`` field from the stored ``_source`` (it stays
        indexed for kNN): retrieved Documents then have no embedding.
    """

    shards: int = 1
    replicas: int = 0
    vectors: bool = True
    vector_index: VectorIndexSettings | None = None
    vectors_in_source: bool = True

    @classmethod
    def from_config(cls, config: IndexConfig) -> IndexLayout:
        store = config.store
        return cls(
            shards=int(getattr(store, "shards", 1)),
            replicas=int(getattr(store, "replicas", 0)),
            vectors=bool(config.embedding.enabled),
            vector_index=getattr(store, "vector_index", None) if config.embedding.enabled else None,
            vectors_in_source=bool(getattr(store, "vectors_in_source", True)),
        )

    def effective_vector_index(self) -> dict[str, Any] | None:
        """The ``index_options`` the node will hold: the configured ones, else the node's default; None when
        BM25-only."""
        if not self.vectors:
            return None
        if self.vector_index is None:
            return dict(NODE_DEFAULT_VECTOR_INDEX)
        return self.vector_index.index_options()

    def describe(self) -> str:
        options = self.effective_vector_index()
        if options is None:
            vectors = "BM25 only (no vector field)"
        else:
            default = " (node default)" if self.vector_index is None else ""
            params = f" (m {options['m']}, ef_construction {options['ef_construction']})" if "m" in options else ""
            vectors = f"vectors {options['type']}{params}{default}"
            if not self.vectors_in_source:
                vectors += ", not in _source"
        return f"shards {self.shards}, replicas {self.replicas}, {vectors}"

    def apply(self, mappings: dict[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Copies of ``mappings`` and ``settings`` (as ``index_mapping`` / ``index_settings`` build them) with this
        layout: shard and replica counts, the vector field's ``index_options``, or no vector field at all."""
        mappings = copy.deepcopy(mappings)
        settings = copy.deepcopy(settings)
        index_settings = settings.setdefault("index", {})
        index_settings["number_of_shards"] = self.shards
        index_settings["number_of_replicas"] = self.replicas
        properties = mappings.setdefault("properties", {})
        if not self.vectors:
            properties.pop("embedding", None)
        elif self.vector_index is not None and "embedding" in properties:
            properties["embedding"] = {**properties["embedding"], "index_options": self.vector_index.index_options()}
        if self.vectors and not self.vectors_in_source:
            source = mappings.setdefault("_source", {})
            source["excludes"] = sorted(set(source.get("excludes", [])) | {"embedding"})
        return mappings, settings

    def differences(self, reported: dict[str, Any]) -> list[str]:
        """What the node holds (:func:`reported_layout`) that differs from this layout, one line each; [] when it
        matches."""
        found = []
        if reported["shards"] != self.shards:
            found.append(f"shards: config {self.shards}, index {reported['shards']}")
        if reported["replicas"] != self.replicas:
            found.append(f"replicas: config {self.replicas}, index {reported['replicas']}")
        expected = self.effective_vector_index()
        if expected is None and reported["vector_field"]:
            found.append("vectors: config BM25-only (no vector field), index has a dense_vector 'embedding' field")
        elif expected is not None and reported["vector_field"] and reported["vector_index"] is not None:
            for key, value in expected.items():
                if reported["vector_index"].get(key) != value:
                    found.append(f"vector_index.{key}: config {value}, index {reported['vector_index'].get(key)}")
        elif expected is not None and not reported["vector_field"]:
            found.append("vectors: config has a vector field, the index has no dense_vector 'embedding' field")
        if (
            expected is not None
            and "vectors_in_source" in reported
            and reported["vectors_in_source"] != self.vectors_in_source
        ):
            found.append(f"vectors_in_source: config {str(self.vectors_in_source).lower()}, index "
                         f"{str(reported['vectors_in_source']).lower()}")
        return found


def reported_layout(client, index: str) -> dict[str, Any]:
    """What the node reports for ``index``: ``{shards, replicas, vector_field, vector_index, dims,
    vectors_in_source}``.

    ``vector_index`` is the ``index_options`` of the ``embedding`` field as the node reports them with
    defaults included (so an index created without them shows the node's default type).
    """
    settings_body = client.indices.get_settings(index=index, flat_settings=True).body
    settings = next(iter(settings_body.values()))["settings"]
    field_body = client.indices.get_field_mapping(index=index, fields="embedding", include_defaults=True).body
    field = next(iter(field_body.values()))["mappings"].get("embedding", {}).get("mapping", {}).get("embedding")
    is_vector = bool(field) and field.get("type") == "dense_vector"
    options = dict(field.get("index_options") or {}) if is_vector else None
    mapping_body = client.indices.get_mapping(index=index).body
    source = next(iter(mapping_body.values()))["mappings"].get("_source", {})
    return {
        "shards": int(settings["index.number_of_shards"]),
        "replicas": int(settings["index.number_of_replicas"]),
        "vector_field": is_vector,
        "vector_index": options,
        "dims": int(field["dims"]) if is_vector and field.get("dims") is not None else None,
        "vectors_in_source": "embedding" not in source.get("excludes", []),
    }


def warn_on_other_layout(client, index: str, layout: IndexLayout) -> list[str]:
    """Log (and return) how an existing index's layout differs from the config's: shards and vector options
    are fixed when an index is created, so only a new index (another ``store.index``) takes new ones."""
    try:
        differences = layout.differences(reported_layout(client, index))
    except Exception as error:  # a check for a warning must not stop a load; say it was not made
        logger.warning(
            "Could not compare the layout of index '%s' with the config (%s: %s).", index, type(error).__name__, error
        )
        return []
    if differences:
        logger.warning(
            "Index '%s' already exists with another layout than the config's (%s); static settings apply only to a "
            "newly created index: write into a new store.index to get them.", index, "; ".join(differences)
        )
    return differences


__all__ = [
    "FLAT_TYPES",
    "HNSW_TYPES",
    "NODE_DEFAULT_VECTOR_INDEX",
    "VECTOR_INDEX_TYPES",
    "IndexLayout",
    "VectorIndexSettings",
    "reported_layout",
    "validate_layout_against_config",
    "validate_store_layout",
    "warn_on_other_layout",
]
