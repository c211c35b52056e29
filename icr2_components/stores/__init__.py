"""Stores: one config and one handle for every store type (the embedded in-memory store, Elasticsearch, and any
backend registered with :func:`register_store_backend`)."""

# Importing the built-in backends registers them (store.type: in_memory, elasticsearch).
from icr2_components.stores import in_memory_backend  # noqa: F401 (registers the backend)
from icr2_components.stores.backend import (
    StoreBackend,
    StoreSettings,
    StoreWrite,
    register_store_backend,
    store_backend,
    store_backend_names,
)
from icr2_components.stores.config import (
    ConfigError,
    IndexConfig,
    config_fingerprint,
    index_config_from_dict,
    load_index_config,
)
from icr2_components.stores.elasticsearch import backend as elasticsearch_backend  # noqa: F401 (registers the backend)
from icr2_components.stores.handle import IndexHandle, IndexReport, open_index, store_fingerprint
from icr2_components.stores.retrieval_methods import (
    reciprocal_rank_fusion,
    register_retrieval_method,
    retrieval_method_names,
)

__all__ = [
    "ConfigError",
    "IndexConfig",
    "IndexHandle",
    "IndexReport",
    "StoreBackend",
    "StoreSettings",
    "StoreWrite",
    "config_fingerprint",
    "index_config_from_dict",
    "load_index_config",
    "open_index",
    "store_fingerprint",
    "reciprocal_rank_fusion",
    "register_retrieval_method",
    "register_store_backend",
    "retrieval_method_names",
    "store_backend",
    "store_backend_names",
]
