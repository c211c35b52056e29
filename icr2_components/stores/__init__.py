"""Stores: one config and one handle for every store type (the embedded in-memory store, Elasticsearch, and any
backend registered with :func:`register_store_backend`)."""

# Importing the built-in backends registers them (store.type: in_memory, elasticsearch).
from icr2_components.stores import in_memory_backend  # noqa: F401 (registers the backend)
from icr2_components.stores.backend import StoreBackend, StoreSettings, register_store_backend
from icr2_components.stores.config import IndexConfig, index_config_from_dict, load_index_config
from icr2_components.stores.elasticsearch import backend as elasticsearch_backend  # noqa: F401 (registers the backend)
from icr2_components.stores.handle import IndexHandle, open_index
from icr2_components.stores.retrieval_methods import register_retrieval_method

__all__ = [
    "IndexConfig",
    "IndexHandle",
    "StoreBackend",
    "StoreSettings",
    "index_config_from_dict",
    "load_index_config",
    "open_index",
    "register_retrieval_method",
    "register_store_backend",
]
