"""Everything only Elasticsearch uses, together: the ``store.type: elasticsearch`` backend (``backend``), the
connection (hosts, auth, TLS), the client and index contract (``store``), the streaming bulk writer, the index
layout (shards, replicas, vector index type) and ``icr2 index --plan`` (``index_plan``).

Generic store code (the config, the handle, embedding, BM25 text analysis) stays in ``stores/``. Importing
``icr2_components.stores`` registers this backend; nothing here is imported eagerly.
"""
