"""Index layout settings (store.shards / replicas / vector_index, BM25-only): validated in the config, and what
the real Elasticsearch node reports back for an index the writer created matches the config (never a mock)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from itertools import islice

import numpy as np
import pytest

from icr2_components.errors import ConfigError
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.elasticsearch.index_layout import NODE_DEFAULT_VECTOR_INDEX, IndexLayout, reported_layout
from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter


def es_config(
    store: dict | None = None,
    embedding: dict | None = None,
    url: str = "http://127.0.0.1:9200",
    index: str = "icr2-index-layout-x",
    checkpoint: str | None = None,
):
    return index_config_from_dict({
        "name": "layout-test",
        "store": {"type": "elasticsearch", "hosts": url, "index": index, **(store or {})},
        "corpus": {"path": "sample"},
        "embedding": {"enabled": True, **(embedding or {})},
        "writer": {"batch_size": 50, "checkpoint_path": checkpoint},
    }, source="test config")


# -- validation: every value, one line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "embedding", "expected"),
    [
        ({"shards": 0}, None, "store.shards must be between 1 and 1024, got 0."),
        ({"shards": 2000}, None, "store.shards must be between 1 and 1024, got 2000."),
        ({"replicas": -1}, None, "store.replicas must be >= 0 (0 on a single node), got -1."),
        ({"shards": "two"}, None, "key 'shards' is 'two' (a string); expected an integer"),
        (
            {"vector_index": {"type": "ivf"}},
            None,
            "store.vector_index.type must be one of hnsw, int8_hnsw, flat, int8_flat, got 'ivf'.",
        ),
        ({"vector_index": {"type": "flat", "m": 16}}, None, "store.vector_index.m applies to the hnsw types only"),
        ({"vector_index": {"type": "int8_flat", "ef_construction": 50}}, None, "or use int8_hnsw"),
        ({"vector_index": {"type": "hnsw", "m": 1}}, None, "store.vector_index.m must be between 2 and 512"),
        (
            {"vector_index": {"type": "hnsw", "ef_construction": 5000}},
            None,
            "store.vector_index.ef_construction must be between 1 and 3200",
        ),
        ({"vector_index": {"type": "hnsw", "mm": 16}}, None, "unknown key(s) ['mm']"),
        ({"vector_index": "hnsw"}, None, "key 'vector_index' is 'hnsw' (a string); expected a mapping or null"),
        (
            {"vector_index": {"type": "hnsw"}},
            {"enabled": False},
            "store.vector_index is set (hnsw) but embedding.enabled is false: a BM25-only index has no vector field.",
        ),
        (
            {"vectors_in_source": False},
            {"enabled": False},
            "store.vectors_in_source is false but embedding.enabled is false",
        ),
        ({"vectors_in_source": "no"}, None, "key 'vectors_in_source' is 'no' (a string)"),
    ],
)
def test_layout_values_are_validated_with_one_line_errors(store, embedding, expected):
    with pytest.raises(ConfigError) as raised:
        es_config(store, embedding)
    message = str(raised.value)
    assert expected in message
    assert "\n" not in message


def test_writer_load_replicas_is_validated_and_reaches_the_writer():
    assert es_config().writer.load_replicas == 0
    refused = (r"section 'writer' of test config: key 'load_replicas' is -1 \(an integer\); expected an integer >= 0 "
               r"or null \(null keeps the index's replicas\)\.")
    for value, expected in ((-1, refused), ("x", "key 'load_replicas' is 'x'")):
        with pytest.raises(ConfigError, match=expected):
            index_config_from_dict({"name": "x", "store": {"type": "elasticsearch"}, "corpus": {"path": "sample"},
                                    "writer": {"load_replicas": value}}, source="test config")
    config = index_config_from_dict(
        {
            "name": "x",
            "store": {"type": "elasticsearch", "replicas": 1},
            "corpus": {"path": "sample"},
            "writer": {"load_replicas": None},
        },
        source="test config",
    )
    assert ElasticsearchStreamingWriter.from_config(config, progress=False).settings.load_replicas is None


def test_layout_from_config_and_what_it_does_to_a_new_index():
    config = es_config({"shards": 3, "replicas": 1, "vector_index": {"type": "hnsw", "m": 8, "ef_construction": 64}})
    layout = IndexLayout.from_config(config)
    assert layout == IndexLayout(shards=3, replicas=1, vectors=True, vector_index=config.store.vector_index)
    mappings, settings = layout.apply(
        {"properties": {"embedding": {"type": "dense_vector", "dims": 4}, "content": {"type": "text"}}},
        {"index": {"number_of_shards": 1, "number_of_replicas": 0, "similarity": {}}},
    )
    assert settings["index"]["number_of_shards"] == 3 and settings["index"]["number_of_replicas"] == 1
    assert mappings["properties"]["embedding"]["index_options"] == {"type": "hnsw", "m": 8, "ef_construction": 64}
    assert layout.describe() == "shards 3, replicas 1, vectors hnsw (m 8, ef_construction 64)"

    bm25_only = IndexLayout.from_config(es_config(embedding={"enabled": False}))
    mappings, _ = bm25_only.apply(
        {"properties": {"embedding": {"type": "dense_vector"}, "content": {"type": "text"}}}, {}
    )
    assert "embedding" not in mappings["properties"] and "content" in mappings["properties"]
    assert bm25_only.describe() == "shards 1, replicas 0, BM25 only (no vector field)"
    # the shipped configs keep today's layout: one shard, no replica, the node's default vector index
    assert IndexLayout.from_config(es_config()).describe().endswith("(node default)")


# -- the real node -----------------------------------------------------------------------------------------


@pytest.fixture
def layout_index(es_client, request):
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:30].strip("-")
    name = f"icr2-index-layout-{stem}-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


def pseudo_embedded(corpus, limit: int, dim: int = 384):
    """Real sample passages with deterministic unit vectors (the layout, not retrieval quality, is under test)."""
    for i, document in enumerate(islice(KiltKnowledgeSource(corpus).documents(), limit)):
        vector = np.random.default_rng(i).standard_normal(dim).astype(np.float32)
        yield replace(document, embedding=(vector / np.linalg.norm(vector)).tolist())


@pytest.mark.elasticsearch
@pytest.mark.parametrize("store", [
    {"shards": 2, "replicas": 0, "vector_index": {"type": "hnsw", "m": 8, "ef_construction": 64}},
    {"shards": 1, "replicas": 1, "vector_index": {"type": "int8_hnsw", "m": 24, "ef_construction": 200}},
    {"vector_index": {"type": "flat"}},
    {"vector_index": {"type": "int8_flat"}},
    {},
], ids=["hnsw-2-shards", "int8_hnsw-1-replica", "flat", "int8_flat", "node-default"])
def test_the_node_reports_the_configured_layout(
    store, elasticsearch_url, es_client, layout_index, sample_files, tmp_path
):
    config = es_config(store, url=elasticsearch_url, index=layout_index, checkpoint=str(tmp_path / "checkpoint.json"))
    writer = ElasticsearchStreamingWriter.from_config(config, progress=False)
    report = writer.write(pseudo_embedded(sample_files.corpus, 60))
    assert report.index_created and report.passages_streamed == 60

    reported = reported_layout(es_client, layout_index)
    layout = IndexLayout.from_config(config)
    assert layout.differences(reported) == []
    assert reported["shards"] == store.get("shards", 1)
    assert reported["replicas"] == store.get("replicas", 0)  # restored after the load's replicas 0
    assert reported["dims"] == 384
    expected = dict(store["vector_index"]) if "vector_index" in store else dict(NODE_DEFAULT_VECTOR_INDEX)
    assert {key: reported["vector_index"].get(key) for key in expected} == expected
    # the mapping as the node reports it without defaults names the configured type too
    mapping = es_client.indices.get_mapping(index=layout_index).body[layout_index]["mappings"]["properties"][
        "embedding"
    ]
    assert mapping["index_options"]["type"] == expected["type"]
    # and kNN answers over it
    hits = es_client.search(
        index=layout_index,
        knn={
            "field": "embedding",
            "query_vector": next(pseudo_embedded(sample_files.corpus, 1)).embedding,
            "k": 3,
            "num_candidates": 20,
        },
        source=False,
    )["hits"]["hits"]
    assert len(hits) == 3


@pytest.mark.elasticsearch
def test_a_bm25_only_index_has_no_vector_field_and_answers_bm25(
    elasticsearch_url, es_client, layout_index, sample_files, tmp_path
):
    config = es_config(
        embedding={"enabled": False},
        url=elasticsearch_url,
        index=layout_index,
        checkpoint=str(tmp_path / "checkpoint.json"),
    )
    handle = IndexHandle(config)
    documents = list(islice(KiltKnowledgeSource(sample_files.corpus).documents(), 80))
    report = handle.build(progress=False, documents=documents)
    assert report.documents_in_store == 80 and report.count_ok

    reported = reported_layout(es_client, layout_index)
    assert reported["vector_field"] is False and reported["vector_index"] is None
    assert IndexLayout.from_config(config).differences(reported) == []
    properties = es_client.indices.get_mapping(index=layout_index).body[layout_index]["mappings"]["properties"]
    assert "embedding" not in properties
    hits = handle.retrieve(documents[5].content[:80], method="bm25", top_k=3)
    assert documents[5].id in [hit.id for hit in hits]
    with pytest.raises(ValueError, match=r"turns embeddings off \(embedding.enabled: false\).*use method bm25"):
        handle.retrieve("anything", method="dense")


@pytest.mark.elasticsearch
def test_vectors_left_out_of_source_still_answer_knn_and_come_back_without_embeddings(
        elasticsearch_url, es_client, layout_index, sample_files, tmp_path):
    config = es_config({"vectors_in_source": False}, url=elasticsearch_url, index=layout_index,
                       checkpoint=str(tmp_path / "checkpoint.json"))
    layout = IndexLayout.from_config(config)
    assert layout.describe().endswith("(node default), not in _source")
    documents = list(pseudo_embedded(sample_files.corpus, 40))
    report = ElasticsearchStreamingWriter.from_config(config, progress=False).write(iter(documents))
    assert report.index_created and report.passages_streamed == 40
    reported = reported_layout(es_client, layout_index)
    assert reported["vectors_in_source"] is False and layout.differences(reported) == []
    stored = es_client.get(index=layout_index, id=documents[7].id)["_source"]
    assert "embedding" not in stored and stored["content"] == documents[7].content
    # kNN searches the indexed vectors: a passage's own vector finds it first
    hits = es_client.search(index=layout_index, knn={"field": "embedding", "query_vector": documents[7].embedding,
                                                     "k": 3, "num_candidates": 40})["hits"]["hits"]
    assert hits[0]["_id"] == documents[7].id and "embedding" not in hits[0]["_source"]
    # and an index created with vectors in _source is reported as differing from this config
    other = f"{layout_index}-full"
    try:
        ElasticsearchStreamingWriter.from_config(es_config(url=elasticsearch_url, index=other,
                                                           checkpoint=str(tmp_path / "b.json")),
                                                 progress=False).write(iter(documents[:5]))
        assert layout.differences(reported_layout(es_client, other)) == ["vectors_in_source: config false, index true"]
    finally:
        es_client.indices.delete(index=other, ignore_unavailable=True)


@pytest.mark.elasticsearch
def test_writer_force_merges_after_a_counted_load_when_the_config_asks(elasticsearch_url, es_client, layout_index,
                                                                         sample_files, tmp_path):
    with pytest.raises(ConfigError, match=r"key 'force_merge_segments' is 0 \(an integer\); expected an integer >= 1 "
                       r"or null \(null: no merge\)\."):
        index_config_from_dict({"name": "x", "store": {"type": "elasticsearch"}, "corpus": {"path": "sample"},
                                "writer": {"force_merge_segments": 0}}, source="test config")
    config = index_config_from_dict({
        "name": "merge", "store": {"type": "elasticsearch", "hosts": elasticsearch_url, "index": layout_index},
        "corpus": {"path": "sample"}, "embedding": {"enabled": False},
        "writer": {"batch_size": 10, "checkpoint_path": str(tmp_path / "c.json"), "force_merge_segments": 1},
    }, source="test config")
    documents = [replace(d, embedding=None) for d in islice(KiltKnowledgeSource(sample_files.corpus).documents(), 60)]

    def segments() -> int:
        shards = es_client.indices.segments(index=layout_index).body["indices"][layout_index]["shards"]["0"]
        return len(shards[0]["segments"])

    first = ElasticsearchStreamingWriter.from_config(config, progress=False, force_merge_segments=None)
    assert first.write(iter(documents)).force_merge_seconds is None
    for document in documents[:3]:   # re-indexed one by one with a refresh each: more segments for the merge
        es_client.index(index=layout_index, id=document.id, document={"content": document.content}, refresh=True)
    assert segments() > 1
    writer = ElasticsearchStreamingWriter.from_config(config, progress=False, resume=False,
                                                      checkpoint_path=str(tmp_path / "second.json"))
    report = writer.write(iter(documents))
    assert report.count_ok and report.force_merge_seconds is not None and "force-merged in" in report.summary()
    assert segments() == 1 and es_client.count(index=layout_index)["count"] == 60


@pytest.mark.elasticsearch
def test_an_existing_index_with_another_layout_is_reported(
    elasticsearch_url, es_client, layout_index, sample_files, tmp_path, caplog
):
    first = es_config(
        {"vector_index": {"type": "flat"}},
        url=elasticsearch_url,
        index=layout_index,
        checkpoint=str(tmp_path / "a.json"),
    )
    ElasticsearchStreamingWriter.from_config(first, progress=False).write(pseudo_embedded(sample_files.corpus, 20))
    second = es_config(
        {"shards": 2, "vector_index": {"type": "hnsw", "m": 8}},
        url=elasticsearch_url,
        index=layout_index,
        checkpoint=str(tmp_path / "b.json"),
    )
    with caplog.at_level(logging.WARNING, logger="icr2_components.stores.elasticsearch.index_layout"):
        report = ElasticsearchStreamingWriter.from_config(second, progress=False, resume=False).write(
            pseudo_embedded(sample_files.corpus, 20)
        )
    assert not report.index_created
    warning = " ".join(record.getMessage() for record in caplog.records)
    assert "shards: config 2, index 1" in warning and "vector_index.type: config hnsw, index flat" in warning
    assert "write into a new store.index" in warning
