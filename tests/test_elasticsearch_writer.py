"""ElasticsearchStreamingWriter against the real node (scripts/elasticsearch.sh), never a mock.

- a load killed part-way (SIGKILL) and re-run is in tests/test_elasticsearch_shipped_config.py, which kills this
  writer under ``icr2 index`` (the confirmed prefix skipped, exactly the passages each id once, the load settings
  kept at the kill and restored after, a checkpoint of another fingerprint refused);
- a load that fails part-way (the corpus reader fails, the connection or the node's answers fail for good) keeps
  the checkpoint of what was confirmed; after a reader failure or a lost connection the re-run resumes from it;
- an unreachable node: retries, then an error naming the URL;
- an embedding dimension that does not match the index: a clear error naming both dimensions;
- refresh/replica settings switched for the load and restored afterwards, on failure too;
- documents Elasticsearch rejects are counted and listed, never dropped silently;
- what the writer writes is read back by ElasticsearchDocumentStore and its BM25 and embedding retrievers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from haystack import Document

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.stores.elasticsearch.backend import ElasticsearchStoreSettings
from icr2_components.stores.elasticsearch.store import (
    ElasticsearchUnreachableError,
    EmbeddingDimensionError,
    build_elasticsearch_store,
    ensure_index,
    index_mapping,
)
from icr2_components.stores.elasticsearch.writer import (
    LOAD_META_KEY,
    BulkWriteError,
    ElasticsearchStreamingWriter,
    StreamingWriterSettings,
    document_to_source,
)


def sample_documents(corpus, limit: int | None = None, dim: int | None = None):
    """The sample's passages in stream order, with deterministic pseudo-embeddings when ``dim`` is set."""
    for i, document in enumerate(islice(KiltKnowledgeSource(corpus).documents(), limit)):
        if dim is not None:
            vector = np.random.default_rng(i).standard_normal(dim).astype(np.float32)
            document = replace(document, embedding=(vector / np.linalg.norm(vector)).tolist())
        yield document


def load_settings(client, index: str) -> dict:
    settings = client.indices.get_settings(index=index, flat_settings=True).body[index]["settings"]
    return {key: settings.get(key) for key in ("index.refresh_interval", "index.number_of_replicas")}


def load_meta(client, index: str) -> dict:
    return client.indices.get_mapping(index=index).body[index]["mappings"].get("_meta") or {}


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TcpProxy:
    """A real TCP forwarder in front of the node, which a test takes down and brings back (no mock: the
    requests still reach the real Elasticsearch, only the connection path breaks)."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname, parts.port or 9200)
        self.port = 0
        self._running = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.05)
        self.port = listener.getsockname()[1]
        self._running.set()
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while self._running.is_set():
                try:
                    client, _ = listener.accept()
                except (TimeoutError, OSError):
                    continue
                try:
                    upstream = socket.create_connection(self.target)
                except OSError:
                    client.close()
                    continue
                with self._lock:
                    self._sockets |= {client, upstream}
                for source, sink in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        self._running.clear()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


# ------------------------------------------------------------------------------------------ no node needed


def test_document_to_source_is_what_elasticsearch_document_store_writes():
    # The store writes Document.to_dict() minus the None fields embedding/blob/score (write_documents).
    def reference(document):
        source = document.to_dict()
        for key in ("embedding", "blob", "score", "sparse_embedding"):
            if source.get(key) is None:
                source.pop(key, None)
        return source

    plain = Document(id="a-w100-00000", content="text", meta={"wikipedia_id": "1", "title": "T", "passage_index": 0})
    embedded = Document(id="b", content="text", meta={"title": "T"}, embedding=[0.1, 0.2])
    colliding = Document(id="c", content="text", meta={"score": 3, "title": "T"})
    for document in (plain, embedded, colliding):
        assert document_to_source(document) == reference(document)
        assert Document.from_dict(document_to_source(document)) == document


# ---------------------------------------------------------------------------------------- against the node

@pytest.mark.elasticsearch
def test_unreachable_node_is_retried_then_named(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    writer = ElasticsearchStreamingWriter(
        url,
        "never-created",
        StreamingWriterSettings(max_retries=2, retry_backoff=0.05, checkpoint_path=tmp_path / "c.json", progress=False),
    )
    started = time.monotonic()
    with pytest.raises(ElasticsearchUnreachableError) as raised:
        writer.write([Document(id="x", content="never written")])
    elapsed = time.monotonic() - started
    assert url in str(raised.value)
    assert raised.value.attempts == 3  # the first try and two retries
    assert "scripts/elasticsearch.sh start" in str(raised.value)
    assert 0.05 + 0.1 <= elapsed < 10  # the two retries waited their backoff (0.05 s, then 0.1 s)
    assert not (tmp_path / "c.json").exists()


@pytest.mark.elasticsearch
def test_connection_lost_mid_load_is_retried_or_named(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path, caplog
):
    # 1. the path to the node breaks for 1.5 s in the middle of the load: retried with backoff, nothing lost
    proxy = TcpProxy(elasticsearch_url).start()

    def broken_for_a_while(documents):
        for i, document in enumerate(documents):
            if i == 300:
                proxy.stop()
                threading.Timer(1.5, proxy.start).start()
            yield document

    writer = ElasticsearchStreamingWriter(
        proxy.url,
        es_index_name,
        StreamingWriterSettings(
            batch_size=100, max_retries=6, retry_backoff=0.2, checkpoint_path=tmp_path / "a.json", progress=False
        ),
    )
    with caplog.at_level(logging.WARNING, logger="icr2_components.stores.elasticsearch.writer"):
        report = writer.write(broken_for_a_while(sample_documents(sample_files.corpus, limit=800)))
    assert any("unreachable" in record.getMessage() and "retry" in record.getMessage() for record in caplog.records)
    assert report.count_ok and report.index_count == 800 and report.failed == 0
    proxy.stop()

    # 2. the path breaks for good: retries, then an error naming the URL; the checkpoint keeps what was confirmed
    es_client.indices.delete(index=es_index_name)
    proxy = TcpProxy(elasticsearch_url).start()

    def broken_for_good(documents):
        for i, document in enumerate(documents):
            if i == 700:
                proxy.stop()
            yield document

    checkpoint = tmp_path / "b.json"
    writer = ElasticsearchStreamingWriter(
        proxy.url,
        es_index_name,
        StreamingWriterSettings(
            batch_size=100,
            max_retries=2,
            retry_backoff=0.05,
            checkpoint_path=checkpoint,
            fingerprint="f",
            progress=False,
        ),
    )
    with pytest.raises(ElasticsearchUnreachableError, match=proxy.url):
        writer.write(broken_for_good(sample_documents(sample_files.corpus, limit=1000)))
    state = json.loads(checkpoint.read_text())
    assert 0 < state["position"] <= 700 and not state["completed"]
    # the settings could not be restored through the broken path; the next run (straight to the node) does it
    assert load_settings(es_client, es_index_name)["index.refresh_interval"] == "-1"
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(batch_size=100, checkpoint_path=checkpoint, fingerprint="f", progress=False),
    )
    report = writer.write(sample_documents(sample_files.corpus, limit=1000))
    assert report.resumed_from == state["position"]
    assert report.count_ok and report.index_count == 1000
    assert load_settings(es_client, es_index_name) == {"index.refresh_interval": None, "index.number_of_replicas": "0"}


@pytest.mark.elasticsearch
def test_documents_answered_429_are_resent_with_backoff_or_reported(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path, caplog
):
    # Elasticsearch's own 429: the read-only-allow-delete block (what a node past its flood-stage disk watermark sets)
    # answers every write to the index 429 until it is lifted
    def block(on: bool | None) -> None:
        es_client.indices.put_settings(index=es_index_name, settings={"index.blocks.read_only_allow_delete": on})

    # 1. blocked for 1 s in the middle of the load: the refused documents are resent after a backoff, none lost
    def blocked_for_a_while(documents):
        for i, document in enumerate(documents):
            if i == 300:
                block(True)
                threading.Timer(1.0, block, args=(None,)).start()
            yield document

    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(
            batch_size=100,
            thread_count=1,
            max_retries=6,
            retry_backoff=0.2,
            checkpoint_path=tmp_path / "a.json",
            progress=False,
        ),
    )
    with caplog.at_level(logging.WARNING, logger="icr2_components.stores.elasticsearch.writer"):
        report = writer.write(blocked_for_a_while(sample_documents(sample_files.corpus, limit=800)))
    assert any("answered 429; resending them (1/6) in 0.2s" in record.getMessage() for record in caplog.records)
    assert report.retried_documents > 0 and report.failed == 0
    assert report.count_ok and report.index_count == 800

    # 2. blocked for good: two resends, then BulkWriteError names the status; the checkpoint stops before the chunk
    es_client.indices.delete(index=es_index_name)
    checkpoint = tmp_path / "b.json"

    def blocked_for_good(documents):
        for i, document in enumerate(documents):
            if i == 300:
                block(True)
            yield document

    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(
            batch_size=100,
            thread_count=1,
            max_retries=2,
            retry_backoff=0.05,
            checkpoint_path=checkpoint,
            progress=False,
        ),
    )
    try:
        with pytest.raises(BulkWriteError, match=r"kept answering 429 .* after 2 retries") as raised:
            writer.write(blocked_for_good(sample_documents(sample_files.corpus, limit=800)))
    finally:
        block(None)
    assert raised.value.report.retried_documents >= 2 * 100  # a whole chunk, resent twice
    state = json.loads(checkpoint.read_text())
    assert 0 < state["position"] <= 300 and not state["completed"]


@pytest.mark.elasticsearch
def test_embedding_dimension_mismatch_is_a_clear_error(elasticsearch_url, es_client, es_index_name, sample_files):
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url, es_index_name, StreamingWriterSettings(batch_size=50, progress=False)
    )
    report = writer.write(sample_documents(sample_files.corpus, limit=120, dim=8))
    assert report.embedding_dim == 8 and report.count_ok and report.index_count == 120
    settings_after_first_load = load_settings(es_client, es_index_name)

    # the whole stream has another dimension: refused before anything is written
    with pytest.raises(EmbeddingDimensionError) as raised:
        writer.write(sample_documents(sample_files.corpus, limit=120, dim=16))
    message = str(raised.value)
    assert "8 dimensions" in message and "16-dimensional" in message and es_index_name in message
    assert (raised.value.index_dim, raised.value.document_dim) == (8, 16)

    # one document in the middle of the stream has another dimension: named, and the settings restored
    def one_bad(documents):
        for i, document in enumerate(documents):
            yield replace(document, embedding=[0.5] * 16) if i == 70 else document

    with pytest.raises(EmbeddingDimensionError, match="16-dimensional") as raised:
        writer.write(one_bad(sample_documents(sample_files.corpus, limit=120, dim=8)))
    assert raised.value.document_id is not None
    assert load_settings(es_client, es_index_name) == settings_after_first_load
    es_client.indices.refresh(index=es_index_name)
    assert es_client.count(index=es_index_name)["count"] == 120


@pytest.mark.elasticsearch
def test_load_settings_are_switched_during_the_load_and_restored_after(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path
):
    ensure_index(es_client, es_index_name)
    es_client.indices.put_settings(
        index=es_index_name, settings={"index.refresh_interval": "7s", "index.number_of_replicas": 1}
    )
    before = load_settings(es_client, es_index_name)
    assert before == {"index.refresh_interval": "7s", "index.number_of_replicas": "1"}

    seen_during_load = []

    def observed(documents, fail_at=None, observe_at=350):
        for i, document in enumerate(documents):
            if i == observe_at:
                seen_during_load.append(load_settings(es_client, es_index_name))
            if i == fail_at:
                raise RuntimeError("the corpus reader failed")
            yield document

    checkpoint = tmp_path / "c.json"
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(
            batch_size=100, checkpoint_path=checkpoint, checkpoint_every=1, fingerprint="f", progress=False
        ),
    )
    # a load that fails part-way: settings restored, checkpoint kept for the re-run
    with pytest.raises(RuntimeError, match="corpus reader failed"):
        writer.write(observed(sample_documents(sample_files.corpus, limit=600), fail_at=450))
    assert seen_during_load[-1] == {"index.refresh_interval": "-1", "index.number_of_replicas": "0"}
    assert load_settings(es_client, es_index_name) == before
    assert LOAD_META_KEY not in load_meta(es_client, es_index_name)
    state = json.loads(checkpoint.read_text())
    assert not state["completed"] and 0 < state["position"] <= 450

    # the re-run reads past the recorded prefix (up to 450 passages, as many as were confirmed before the failure)
    # before it writes, and switches the settings only then: look after it
    report = writer.write(observed(sample_documents(sample_files.corpus, limit=600), observe_at=550))
    assert report.resumed_from == state["position"]
    assert report.count_ok and report.index_count == 600
    assert seen_during_load[-1] == {"index.refresh_interval": "-1", "index.number_of_replicas": "0"}
    assert load_settings(es_client, es_index_name) == before


@pytest.mark.elasticsearch
def test_rejected_documents_are_counted_and_listed(elasticsearch_url, es_client, es_index_name, sample_files, tmp_path):
    def with_bad_ones(documents):
        for i, document in enumerate(documents):
            # the field is mapped as long by then: Elasticsearch rejects these two
            yield (
                replace(document, meta={**document.meta, "passage_index": "not a number"})
                if i in (10, 150)
                else document
            )

    checkpoint = tmp_path / "c.json"
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(batch_size=100, checkpoint_path=checkpoint, progress=False),
    )
    # the first document fixes passage_index as a number in the mapping; document 10 comes in a later request
    first = list(sample_documents(sample_files.corpus, limit=1))
    writer.write(first)
    report = writer.write(with_bad_ones(sample_documents(sample_files.corpus, limit=200)))
    bad_ids = {d.id for i, d in enumerate(sample_documents(sample_files.corpus, limit=200)) if i in (10, 150)}
    assert report.failed == 2
    assert {f["id"] for f in report.failure_examples} == bad_ids
    assert all(f["status"] == 400 and f["type"] for f in report.failure_examples)
    listed = [json.loads(line) for line in Path(report.failures_path).read_text().splitlines()]
    assert {f["id"] for f in listed} == bad_ids
    assert report.count_ok and report.index_count == report.expected_count == 198


@pytest.mark.elasticsearch
def test_elasticsearch_document_store_and_retrievers_read_what_we_write(
    elasticsearch_url, es_client, es_index_name, sample_files
):
    from haystack_integrations.components.retrievers.elasticsearch import (
        ElasticsearchBM25Retriever,
        ElasticsearchEmbeddingRetriever,
    )
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    documents = list(sample_documents(sample_files.corpus, limit=400, dim=384))
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(batch_size=100, bm25_k1=1.2, bm25_b=0.75, progress=False),
    )
    report = writer.write(iter(documents))
    assert report.count_ok and report.index_count == 400 and report.embedding_dim == 384

    mapping = es_client.indices.get_mapping(index=es_index_name).body[es_index_name]["mappings"]
    assert mapping["properties"]["embedding"]["dims"] == 384
    assert mapping["properties"]["embedding"]["similarity"] == "cosine"
    settings = es_client.indices.get_settings(index=es_index_name, flat_settings=True).body[es_index_name]["settings"]
    assert (settings["index.similarity.default.k1"], settings["index.similarity.default.b"]) == ("1.2", "0.75")
    # our mapping is the store's default one plus the vector's dims (guards against drift in the library)
    library_default = ElasticsearchDocumentStore(hosts=elasticsearch_url, index="unused")._default_mappings
    ours = index_mapping(None)
    assert ours["dynamic_templates"] == library_default["dynamic_templates"]
    for name, spec in library_default["properties"].items():
        assert ours["properties"][name] == spec

    store = build_elasticsearch_store(
        ElasticsearchStoreSettings(hosts=elasticsearch_url, index=es_index_name), embedding_dim=384
    )
    assert store.count_documents() == 400
    target = documents[0]
    [read] = store.filter_documents({"field": "id", "operator": "==", "value": target.id})
    assert (read.id, read.content, read.meta) == (target.id, target.content, target.meta)
    assert np.allclose(read.embedding, target.embedding, atol=1e-6)
    [by_meta] = store.filter_documents(
        {"field": "meta.wikipedia_id", "operator": "==", "value": target.meta["wikipedia_id"]}
    )
    assert by_meta.id == target.id

    bm25 = ElasticsearchBM25Retriever(document_store=store, top_k=3).run(query="first Nobel Prize in Physics Röntgen")[
        "documents"
    ]
    assert bm25[0].id == target.id
    dense = ElasticsearchEmbeddingRetriever(document_store=store, top_k=3).run(
        query_embedding=documents[123].embedding
    )["documents"]
    assert dense[0].id == documents[123].id
