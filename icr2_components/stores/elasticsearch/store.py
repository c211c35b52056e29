"""Elasticsearch: the client, the index contract shared with elasticsearch-haystack, and the document store.

The index layout is the one ``ElasticsearchDocumentStore`` reads (see its default mapping and
``write_documents`` in elasticsearch-haystack): the document id as ``_id`` and as an ``id`` field, ``content``
as a ``text`` field, the ``embedding`` as a ``dense_vector`` (cosine, indexed for kNN) and every meta field
flattened to the top level, strings mapped as ``keyword`` by a dynamic template. We add what that default
leaves open: the vector's ``dims`` when known, the BM25 ``k1``/``b`` of the config as the index's default
similarity, and 0 replicas (a single local node cannot host replicas).

Usage:
    >>> from icr2_components.stores.elasticsearch.settings import ElasticsearchStoreSettings
    >>> store = build_elasticsearch_store(ElasticsearchStoreSettings(index="icr2-kilt"), embedding_dim=384)
    >>> store.count_documents()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from icr2_components.extras import require_extra
from icr2_components.retrying import RetryPolicy
from icr2_components.stores import text_analysis
from icr2_components.stores.config import IndexConfig
from icr2_components.stores.elasticsearch.connection import connection_options, split_hosts
from icr2_components.stores.elasticsearch.index_layout import warn_on_other_layout

if TYPE_CHECKING:
    from icr2_components.stores.elasticsearch.index_layout import IndexLayout
    from icr2_components.stores.elasticsearch.settings import ElasticsearchStoreSettings

Similarity = Literal["cosine", "dot_product", "l2_norm", "max_inner_product"]
T = TypeVar("T")
logger = logging.getLogger(__name__)

# The keys Haystack's Document.to_dict() produces besides the flattened meta.
DOCUMENT_FIELDS = ("id", "content", "blob", "score", "embedding", "sparse_embedding")


class ElasticsearchUnreachableError(ConnectionError):
    """Elasticsearch did not answer after the configured retries; the message names the URL."""

    def __init__(self, url: str, attempts: int, seconds: float, last_error: BaseException | None) -> None:
        self.url = url
        self.attempts = attempts
        self.seconds = seconds
        self.last_error = last_error
        detail = f"{type(last_error).__name__}: {last_error}" if last_error is not None else "no answer"
        super().__init__(
            f"Elasticsearch is unreachable at {url}: {attempts} attempt(s) over {seconds:.1f}s failed (last error: "
            f"{detail}). "
            "Start a local node with `bash scripts/elasticsearch.sh start`, or point store.hosts at a running cluster."
        )


class EmbeddingDimensionError(ValueError):
    """Documents carry embeddings whose dimension differs from the index's ``dense_vector`` field."""

    def __init__(
        self, index: str, index_dim: int | None, document_dim: int, document_id: str | None = None, detail: str = ""
    ) -> None:
        self.index = index
        self.index_dim = index_dim
        self.document_dim = document_dim
        self.document_id = document_id
        which = f"document {document_id!r}" if document_id else "the documents"
        message = (
            f"Embedding dimension mismatch for index '{index}': the index's 'embedding' field has {index_dim} "
            "dimensions "
            f"but {which} carry {document_dim}-dimensional embeddings."
        )
        super().__init__(
            message
            + (
                f" {detail}"
                if detail
                else " Use the embedding model the index was built with, or write into a new index (store.index)."
            )
        )


# -------------------------------------------------------------------------------------------------- client


def redact_url(url: str) -> str:
    """The URL without credentials, for messages and checkpoints."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


def describe_hosts(hosts: str | list[str]) -> str:
    return ", ".join(redact_url(h) for h in split_hosts(hosts))


def _api_key_from_env() -> str | tuple[str, str] | None:
    # The same environment variables ElasticsearchDocumentStore reads by default.
    api_key = os.environ.get("ELASTIC_API_KEY")
    api_key_id = os.environ.get("ELASTIC_API_KEY_ID")
    if api_key and api_key_id:
        return (api_key_id, api_key)
    return api_key or None


def build_elasticsearch_client(
    hosts: str | list[str],
    *,
    request_timeout: float = 60.0,
    max_retries: int = 0,
    fast_serializer: bool = True,
    **kwargs: Any,
):
    """An ``elasticsearch.Elasticsearch`` client; orjson serialisation when orjson is installed.

    ``max_retries`` is the transport's own immediate retry count (no backoff); the writer sets it to 0 and
    retries with backoff itself.
    """
    require_extra("elasticsearch", "An Elasticsearch client", ("elasticsearch",))
    import elasticsearch

    options: dict[str, Any] = {
        "request_timeout": request_timeout,
        "max_retries": max_retries,
        "retry_on_timeout": max_retries > 0,
    }
    api_key = _api_key_from_env()
    if api_key is not None:
        options["api_key"] = api_key
    serializer_cls = getattr(elasticsearch, "OrjsonSerializer", None)
    if fast_serializer and serializer_cls is not None and "serializer" not in kwargs:
        options["serializer"] = serializer_cls()
    options.update(kwargs)
    return elasticsearch.Elasticsearch(split_hosts(hosts), **options)


def is_connection_error(error: BaseException) -> bool:
    """True for failures to reach the node (refused, reset, timed out), not for answers the node gave."""
    from elastic_transport import ConnectionError as TransportConnectionError
    from elastic_transport import ConnectionTimeout, TlsError

    return isinstance(error, (TransportConnectionError, ConnectionTimeout)) and not isinstance(error, TlsError)


def call_with_retries(
    call: Callable[[], T],
    *,
    url: str,
    policy: RetryPolicy,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Run ``call``; on a connection failure retry as ``policy`` says (exponential backoff).

    Raises :class:`ElasticsearchUnreachableError` naming ``url`` when every attempt failed to connect. Any
    other error (an HTTP error answered by the node) propagates at once.
    """
    return policy.call(
        call,
        retry_if=is_connection_error,
        give_up=lambda attempts, seconds, error: ElasticsearchUnreachableError(url, attempts, seconds, error),
        on_retry=on_retry,
    )


def wait_until_reachable(client, url: str, *, policy: RetryPolicy) -> dict:
    """Cluster health once the node answers (``GET /_cluster/health`` works on every distribution)."""
    return dict(call_with_retries(lambda: client.cluster.health(), url=url, policy=policy).body)


# ---------------------------------------------------------------------------------------------- the index


def index_mapping(embedding_dim: int | None = None, similarity: Similarity = "cosine") -> dict[str, Any]:
    """The mapping ``ElasticsearchDocumentStore`` uses by default, with the vector's dims when known."""
    embedding: dict[str, Any] = {"type": "dense_vector", "index": True, "similarity": similarity}
    if embedding_dim is not None:
        embedding["dims"] = int(embedding_dim)
    return {
        "properties": {
            "embedding": embedding,
            "content": {"type": "text"},
            # Haystack writes the id into the source too; ElasticsearchDocumentStore filters on it as "id"
            "id": {"type": "keyword"},
            # {tokenizer fingerprint: tokens} stored at indexing (models/token_counting.py): kept in _source, not
            # indexed, so any number of tokenizers adds no field to the mapping
            "token_counts": {"type": "object", "enabled": False},
        },
        "dynamic_templates": [
            {"strings": {"path_match": "*", "match_mapping_type": "string", "mapping": {"type": "keyword"}}}
        ],
    }


def index_settings(
    *, bm25_k1: float = 0.9, bm25_b: float = 0.4, number_of_shards: int = 1, number_of_replicas: int = 0
) -> dict[str, Any]:
    """Shards, replicas (0 on one node) and the BM25 parameters as the default similarity of text fields."""
    return {
        "index": {
            "number_of_shards": int(number_of_shards),
            "number_of_replicas": int(number_of_replicas),
            "similarity": {"default": {"type": "BM25", "k1": float(bm25_k1), "b": float(bm25_b)}},
        }
    }


def index_embedding_dim(client, index: str) -> tuple[bool, int | None]:
    """``(has_dense_vector_field, dims)`` of the index's ``embedding`` field (dims None while unset)."""
    mapping = client.indices.get_mapping(index=index).body
    properties = next(iter(mapping.values()))["mappings"].get("properties", {})
    field = properties.get("embedding")
    if not field or field.get("type") != "dense_vector":
        return False, None
    dims = field.get("dims")
    return True, int(dims) if dims is not None else None


def ensure_index(
    client,
    index: str,
    *,
    embedding_dim: int | None = None,
    similarity: Similarity = "cosine",
    bm25_k1: float = 0.9,
    bm25_b: float = 0.4,
    number_of_shards: int = 1,
    layout: IndexLayout | None = None,
    analyzer: str = "english",
) -> bool:
    """Create ``index`` with our mapping and settings unless it exists; check the embedding dimension.

    ``layout`` (:class:`~icr2_components.stores.elasticsearch.index_layout.IndexLayout`, from the config) sets the
    shards,
    replicas and vector index of a new index, or leaves out the vector field (BM25 only); an existing index
    whose layout differs is logged. Returns True when the index was created. Raises :class:`EmbeddingDimensionError`
    when the index exists
    with a ``dense_vector`` of another dimension than ``embedding_dim`` (or with no ``dense_vector`` field).
    """
    import elasticsearch

    if not client.indices.exists(index=index):
        mappings = index_mapping(embedding_dim, similarity)
        settings = index_settings(
            bm25_k1=bm25_k1, bm25_b=bm25_b, number_of_shards=number_of_shards, number_of_replicas=0
        )
        if layout is not None:
            mappings, settings = layout.apply(mappings, settings)
        try:
            client.indices.create(index=index, mappings=text_analysis.with_text_analysis(mappings, analyzer),
                                  settings=settings)
            return True
        except elasticsearch.BadRequestError as error:
            # created meanwhile by another process: fall through to the checks
            if getattr(error, "error", "") != "resource_already_exists_exception":
                text_analysis.raise_if_analyzer_missing(error, analyzer)
                raise
    _warn_on_other_bm25(client, index, bm25_k1, bm25_b)
    if layout is not None:
        warn_on_other_layout(client, index, layout)
    text_analysis.warn_on_other_analyzer(client, index, analyzer)
    if embedding_dim is not None:
        has_vector, dims = index_embedding_dim(client, index)
        if not has_vector:
            raise EmbeddingDimensionError(
                index,
                None,
                embedding_dim,
                detail="The index has no dense_vector field 'embedding' (it was not created by this writer or by "
                "ElasticsearchDocumentStore); write into a new index.",
            )
        if dims is not None and dims != embedding_dim:
            raise EmbeddingDimensionError(index, dims, embedding_dim)
    return False


def _warn_on_other_bm25(client, index: str, k1: float, b: float) -> None:
    # BM25 parameters are a static index setting: an existing index keeps the ones it was created with
    body = client.indices.get_settings(index=index, flat_settings=True).body
    settings = next(iter(body.values()))["settings"]
    current = (settings.get("index.similarity.default.k1"), settings.get("index.similarity.default.b"))
    if current == (None, None):
        current_text = "Elasticsearch's defaults (k1=1.2, b=0.75)"
    else:
        current_text = f"k1={current[0]}, b={current[1]}"
    try:
        same = current != (None, None) and float(current[0]) == float(k1) and float(current[1]) == float(b)
    except (TypeError, ValueError):
        same = False
    if not same:
        logger.warning(
            "Index '%s' already exists with BM25 %s; the requested k1=%s, b=%s only apply to a newly created index.",
            index,
            current_text,
            k1,
            b,
        )


# --------------------------------------------------------------------------------------------- the store


def store_config_of(config: ElasticsearchStoreSettings | IndexConfig) -> ElasticsearchStoreSettings:
    return config.store if isinstance(config, IndexConfig) else config


def build_elasticsearch_store(
    config: ElasticsearchStoreSettings | IndexConfig,
    *,
    embedding_dim: int | None = None,
    embedding_similarity: Similarity = "cosine",
    **client_kwargs: Any,
):
    """``ElasticsearchDocumentStore`` for ``store.hosts``/``store.index`` with the config's timeout and retries.

    The store is given our mapping as its ``custom_mapping``, so an index it creates on first use (before any
    write) has the same layout the streaming writer creates. Authentication, as in elasticsearch-haystack,
    comes from ``ELASTIC_API_KEY`` / ``ELASTIC_API_KEY_ID`` when set.
    """
    require_extra("elasticsearch", "The Elasticsearch document store")
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore


    store = store_config_of(config)
    hosts = split_hosts(store.hosts)
    client_kwargs = {**connection_options(store), **client_kwargs}
    return ElasticsearchDocumentStore(
        hosts=hosts if len(hosts) > 1 else hosts[0],
        index=store.index,
        custom_mapping=text_analysis.with_text_analysis(
            index_mapping(embedding_dim, embedding_similarity), getattr(store, "analyzer", "english")
        ),
        embedding_similarity_function=embedding_similarity,
        request_timeout=store.request_timeout,
        max_retries=store.max_retries,
        retry_on_timeout=True,
        **client_kwargs,
    )
