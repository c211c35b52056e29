"""The version of the stores' retrieval behaviour, part of every index-reading pipeline's ``icr2 compare`` hash.

``icr2 compare`` caches answers under a hash of the pipeline (``icr2_components.pipeline_spec.behaviour_hash``),
which for a pipeline that reads an index also covers the index config's contents and this constant. A change
to a store's code that changes what it retrieves for the same config leaves the config alone, so only this
constant tells the cache that old answers came from other passages.

Usage:
    >>> from icr2_components.stores.retrieval_version import RETRIEVAL_BEHAVIOUR_VERSION
    >>> RETRIEVAL_BEHAVIOUR_VERSION
    '2'
"""

#: CHANGE THIS whenever a store's retrieval results change for an unchanged index config: the analyzer or
#: tokenisation, the BM25 implementation or its parameters, the fields searched (content, title), dense
#: retrieval, hybrid fusion, or passage splitting. Every cached `icr2 compare` answer of a pipeline that reads an
#: index is then re-answered. History: 1 = before this constant (the in-memory store's BM25 before
#: commit 30d8cf5; never recorded in a hash); 2 = in-memory BM25 on bm25s with
#: store.analyzer (default english) over content and title, Elasticsearch multi_match over both (commit 30d8cf5).
RETRIEVAL_BEHAVIOUR_VERSION = "2"

__all__ = ["RETRIEVAL_BEHAVIOUR_VERSION"]
