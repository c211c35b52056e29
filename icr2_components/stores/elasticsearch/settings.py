"""The ``store:`` section of an Elasticsearch index config, checked on its own (the connection and layout keys by
the modules that use them).

Usage:
    >>> settings = ElasticsearchStoreSettings(hosts="http://127.0.0.1:9200", index="icr2-kilt")
    >>> settings.validate()
"""

from __future__ import annotations

from dataclasses import dataclass

from icr2_components.stores.backend import StoreSettings
from icr2_components.stores.config import ConfigError
from icr2_components.stores.elasticsearch.connection import validate_connection_settings
from icr2_components.stores.elasticsearch.index_layout import (
    VectorIndexSettings,
    validate_layout_against_config,
    validate_store_layout,
)
from icr2_components.stores.text_analysis import DEFAULT_ANALYZER, validate_analyzer
from icr2_components.strict_mapping import Fraction, NonNegativeNumber, PathText, check_fields


@dataclass
class ElasticsearchStoreSettings(StoreSettings):
    """``store:`` keys of an Elasticsearch index."""

    type: str = "elasticsearch"
    hosts: str | list[str] = "http://127.0.0.1:9200"
    index: str = "icr2-kilt"
    request_timeout: float = 60.0
    max_retries: int = 3
    # BM25's analyzer of a newly created index: english (stemming, stop words) or standard; the content and the
    # title (title.text) are searched as fields. See stores/text_analysis.py.
    analyzer: str = DEFAULT_ANALYZER
    # BM25 parameters of a newly created index (a static index setting: an existing index keeps its own)
    bm25_k1: NonNegativeNumber = 0.9
    bm25_b: Fraction = 0.4
    # an external cluster (see stores/elasticsearch/connection.py): TLS CA file, basic auth (the password from
    # the environment variable password_env); an API key comes from ELASTIC_API_KEY
    ca_certs: PathText | None = None
    verify_certs: bool = True
    username: str | None = None
    password_env: str = "ELASTIC_PASSWORD"
    # layout of a newly created index (icr2_components.stores.elasticsearch.index_layout): primary shards, replicas, and
    # the
    # dense_vector index_options (hnsw | int8_hnsw | flat | int8_flat, m, ef_construction; null: the node's default)
    shards: int = 1
    replicas: int = 0
    vector_index: VectorIndexSettings | None = None
    # false: the vectors are indexed for kNN but left out of each passage's stored _source (about three quarters of
    # a passage's disk with 384 float32 dims); retrieved Documents then carry no embedding, and the index cannot be
    # re-indexed from itself (ES "Tune approximate kNN search": exclude vector fields from _source)
    vectors_in_source: bool = True

    def validate(self) -> None:
        check_fields(self, "index config section 'store'", ConfigError)
        validate_analyzer(self.analyzer)
        if not self.hosts:
            raise ConfigError("store.hosts is required for an Elasticsearch store (e.g. http://127.0.0.1:9200).")
        if self.max_retries < 0:
            raise ConfigError("store.max_retries must be >= 0.")
        try:
            validate_connection_settings(self)
        except ConfigError:
            raise
        except ValueError as error:  # the connection module's own checks (no host given) say it as a ValueError
            raise ConfigError(str(error)) from None
        validate_store_layout(self.shards, self.replicas, self.vector_index)

    def validate_with_config(self, config) -> None:
        """Checks that need the other sections: a vector index type with embeddings off is an error."""
        validate_layout_against_config(config)


__all__ = ["ElasticsearchStoreSettings"]
