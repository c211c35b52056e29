"""``store.type: elasticsearch``: an Elasticsearch index that elasticsearch-haystack's document store reads.

Loaded by :class:`~icr2_components.stores.elasticsearch.writer.ElasticsearchStreamingWriter` (bounded memory,
checkpointed, resumable, count-checked); opened as ``ElasticsearchDocumentStore`` with the mapping and client
settings of :mod:`~icr2_components.stores.elasticsearch.store`. An index is built deliberately with ``icr2 index``:
opening one that does not exist is an error, not an empty index created behind the user's back.

Usage:
    >>> from icr2_components.stores import IndexHandle, load_index_config
    >>> handle = IndexHandle(load_index_config("indexing/kilt-sample-elasticsearch.yaml"))
    >>> handle.build().details["checkpoint_path"]
    >>> handle.retrieve("who got the first nobel prize in physics", method="bm25", top_k=5)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator

from haystack import Document

from icr2_components.retrying import RetryPolicy
from icr2_components.stores.backend import StoreBackend, StoreWrite, register_store_backend
from icr2_components.stores.elasticsearch.connection import connection_options
from icr2_components.stores.elasticsearch.settings import ElasticsearchStoreSettings
from icr2_components.stores.elasticsearch.store import (
    build_elasticsearch_client,
    build_elasticsearch_store,
    call_with_retries,
    describe_hosts,
)
from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter
from icr2_components.stores.errors import IndexNotBuiltError
from icr2_components.stores.text_analysis import elasticsearch_bm25_query

__all__ = ["ElasticsearchStoreBackend", "ElasticsearchStoreSettings", "QueryTooLongError"]


class QueryTooLongError(ValueError):
    """The query expands to more clauses than Elasticsearch allows; the message names the limit."""

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit


@register_store_backend("elasticsearch")
class ElasticsearchStoreBackend(StoreBackend):
    """An index on an Elasticsearch cluster: streamed in with resume, searched by BM25 and kNN."""

    settings_class = ElasticsearchStoreSettings
    builds_on_first_use = False
    settings: ElasticsearchStoreSettings

    @property
    def index_name(self) -> str:
        return self.settings.index

    def url(self) -> str:
        return describe_hosts(self.settings.hosts)

    def describe(self) -> str:
        return f"elasticsearch index '{self.settings.index}' at {self.url()}"

    def index_exists(self) -> bool:
        settings = self.settings
        client = build_elasticsearch_client(
            settings.hosts, request_timeout=settings.request_timeout, max_retries=0, **connection_options(settings)
        )
        try:
            return call_with_retries(
                lambda: bool(client.indices.exists(index=settings.index)),
                url=self.url(),
                policy=RetryPolicy(max_retries=settings.max_retries, initial_backoff=0.5, max_backoff=5.0),
            )
        finally:
            client.close()

    def open_document_store(self):
        """The index as ``ElasticsearchDocumentStore``; refused when it was never built, since Haystack's store
        would create it empty and every search would answer nothing with no word."""
        if not self.index_exists():
            raise IndexNotBuiltError(
                f"Elasticsearch at {self.url()} has no index '{self.settings.index}' (store.index of "
                f"'{self.config.name}'): "
                "build it first with `icr2 index --config <this config>`."
            )
        return build_elasticsearch_store(
            self.settings, embedding_dim=self.embedder.dimension if self.embedder else None
        )

    def write(
        self,
        documents: Iterator[Document],
        *,
        prepare: Callable[[Iterable[Document]], Iterable[Document]] | None = None,
        progress: bool = True,
    ) -> StoreWrite:
        writer = ElasticsearchStreamingWriter.from_config(self.config, fingerprint=self.fingerprint())
        # the writer skips a resumed prefix on the raw stream and only then embeds: a resume after N
        # passages costs reading N passages, not N embeddings
        written = writer.write(documents, progress=progress, prepare=prepare)
        details = {key: value for key, value in written.as_dict().items()
                   if key not in ("index", "passages_streamed", "resumed_from", "failed", "count_ok")}
        return StoreWrite(
            passages_streamed=written.passages_streamed,
            resumed_from=written.resumed_from,
            rejected=written.failed,
            count_ok=written.count_ok,
            details=details,
        )

    # -- retrieval ------------------------------------------------------------------------------------------

    def bm25_retriever(self, document_store):
        from haystack_integrations.components.retrievers.elasticsearch import ElasticsearchBM25Retriever

        # fuzziness off: plain BM25, as the in-memory store ranks it (the integration's default "AUTO" also
        # matches misspellings, which re-ranks most lists: top-10 overlap between stores fell to 0.39)
        return ElasticsearchBM25Retriever(document_store=document_store, fuzziness="0")

    def embedding_retriever(self, document_store):
        from haystack_integrations.components.retrievers.elasticsearch import ElasticsearchEmbeddingRetriever

        return ElasticsearchEmbeddingRetriever(document_store=document_store)

    def bm25_documents(self, document_store, query: str, top_k: int, filters: dict | None) -> list[Document]:
        """BM25 over the content and the title (:func:`~icr2_components.stores.text_analysis.elasticsearch_bm25_query`);
        Elasticsearch's too-many-clauses refusal becomes a :class:`QueryTooLongError` naming the limit."""
        try:
            return _bm25_search(document_store, self.settings.index, query, top_k, filters)
        except Exception as error:  # only the clause limit is translated, the rest re-raised
            limit = _clause_limit(error)
            if limit is None:
                raise
            raise QueryTooLongError(
                f"The query ({len(query)} characters, {len(query.split())} words) is too long for Elasticsearch's "
                "BM25: "
                f"it expands to more than the {f'{limit} ' if limit else ''}query clauses the node allows "
                "(indices.query.bool.max_clause_count). "
                "Shorten the query (a question, not a document).",
                limit=limit,
            ) from error

    def random_documents(self, document_store, n: int, seed: int, exclude_ids: set[str]) -> list[Document]:
        """A seeded ``random_score`` query, over-fetching to make up for excluded hits."""
        response = document_store.client.search(
            index=self.settings.index,
            size=n + len(exclude_ids),
            query={"function_score": {"query": {"match_all": {}}, "random_score": {"seed": seed, "field": "_seq_no"}}},
            source=False,
        )
        ids = [hit["_id"] for hit in response["hits"]["hits"] if hit["_id"] not in exclude_ids][:n]
        if not ids:
            return []
        found = {d.id: d for d in document_store.filter_documents({"field": "id", "operator": "in", "value": ids})}
        return [found[i] for i in ids if i in found]


def _bm25_search(document_store, index: str, query: str, top_k: int, filters: dict | None) -> list[Document]:
    """The content-and-title BM25 query, read back as Haystack documents (flattened meta, ``_score`` as score)."""
    if not query:
        raise ValueError("query must be a non-empty string")
    search: dict = elasticsearch_bm25_query(query)
    if filters:
        from icr2_components.stores.elasticsearch.filters import filters_to_query

        search = {"bool": {"must": [search], "filter": filters_to_query(filters)}}
    response = document_store.client.search(index=index, size=top_k, query=search)
    return [Document.from_dict({**hit["_source"], "score": hit["_score"]}) for hit in response["hits"]["hits"]]


_CLAUSE_LIMIT = re.compile(
    r"maxClauseCount is set to (\d+)|max_clause_count.*?(\d+)|too_many_(?:nested_)?clauses", re.IGNORECASE
)


def _clause_limit(error: BaseException) -> int | None:
    """Elasticsearch's clause limit when ``error`` is its too-many-clauses refusal (found in the error text)."""
    text = str(error)
    info = getattr(error, "info", None) or getattr(error, "body", None)
    if info:
        text += " " + json.dumps(info, default=str)
    match = _CLAUSE_LIMIT.search(text)
    if match is None:
        return None
    number = match.group(1) or match.group(2)
    return int(number) if number else 0
