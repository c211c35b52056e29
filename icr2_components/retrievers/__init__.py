"""Retrievers over an index config (in-memory or Elasticsearch)."""

from icr2_components.retrievers.index_retriever import IndexRetriever

__all__ = [
    "IndexRetriever",
]
