"""Stores: one config and one handle for the embedded in-memory store and Elasticsearch."""

from icr2_components.stores.config import ConfigError, IndexConfig, index_config_from_dict, load_index_config
from icr2_components.stores.handle import (
    RETRIEVAL_METHODS,
    IndexHandle,
    IndexReport,
    config_fingerprint,
    open_index,
    reciprocal_rank_fusion,
)

__all__ = [
    "RETRIEVAL_METHODS",
    "ConfigError",
    "IndexConfig",
    "IndexHandle",
    "IndexReport",
    "config_fingerprint",
    "index_config_from_dict",
    "load_index_config",
    "open_index",
    "reciprocal_rank_fusion",
]
