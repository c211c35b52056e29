"""Bad input against the real Elasticsearch node, never a mock: repeated articles, a byte that is not
UTF-8, a load whose count check fails, an index that was never built, an over-long query, and a resume that
must not re-embed the prefix it skips."""

from __future__ import annotations

import json
from itertools import islice

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.elasticsearch.backend import QueryTooLongError
from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter, StreamingWriterSettings
from icr2_components.stores.embedding import PassageEmbedder
from icr2_components.stores.errors import DocumentCountMismatchError, IndexNotBuiltError

pytestmark = pytest.mark.elasticsearch


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def es_config(url: str, index: str, corpus: str, tmp_path, embedding: bool = False) -> dict:
    return {
        "name": index,
        "store": {"type": "elasticsearch", "hosts": url, "index": index, "max_retries": 1, "request_timeout": 30},
        "corpus": {"path": corpus},
        "embedding": {"enabled": embedding},
        "writer": {"batch_size": 50, "checkpoint_path": str(tmp_path / "ckpt.json")},
    }


def test_repeated_article_and_bad_byte_into_elasticsearch_load_completely(
    elasticsearch_url, es_client, es_index_name, tmp_path
):
    path = tmp_path / "ks.jsonl"
    lines = [
        json.dumps(
            {"wikipedia_id": str(i), "wikipedia_title": f"T{i}", "text": [f"T{i}", words(f"a{i}x", 150)]}
        ).encode()
        for i in range(12)
    ]
    # a second record of article 4 (it would overwrite 2 of its passages and add a third) and a line with 0xff
    lines.insert(
        6, json.dumps({"wikipedia_id": "4", "wikipedia_title": "T4 again", "text": ["T4", words("zzz", 300)]}).encode()
    )
    lines.insert(
        9,
        json.dumps({"wikipedia_id": "99", "wikipedia_title": "Bad", "text": ["Bad", "caf_"]})
        .encode()
        .replace(b"caf_", b"caf\xff"),
    )
    path.write_bytes(b"\n".join(lines) + b"\n")
    handle = IndexHandle(index_config_from_dict(es_config(elasticsearch_url, es_index_name, str(path), tmp_path)))
    report = handle.build(progress=False)
    assert report.passages_streamed == 24 and report.documents_in_store == 24 and report.count_ok
    assert report.skips["counts"] == {"duplicate wikipedia_id (first record kept)": 1, "not UTF-8": 1}
    assert report.skips["examples"]["duplicate wikipedia_id (first record kept)"] == ["line 7: wikipedia_id=4"]
    assert report.skips["examples"]["not UTF-8"][0].startswith("line 10: byte ")
    hits = es_client.search(index=es_index_name, query={"term": {"wikipedia_id": "4"}}, size=10)["hits"]["hits"]
    assert sorted(h["_id"] for h in hits) == ["4-w100-00000", "4-w100-00001"]
    assert all(h["_source"]["title"] == "T4" and "zzz" not in h["_source"]["content"] for h in hits)
    checkpoint = json.loads((tmp_path / "ckpt.json").read_text())
    assert checkpoint["completed"] is True and checkpoint["position"] == 24


def test_a_load_whose_count_check_fails_is_never_marked_complete(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path
):
    documents = list(islice(KiltKnowledgeSource(sample_files.corpus).documents(), 30))
    stream = documents + documents[:5]  # a stream that repeats ids (the writer is given it directly)
    checkpoint = tmp_path / "ckpt.json"
    writer = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(batch_size=10, checkpoint_path=checkpoint, progress=False),
    )
    with pytest.raises(DocumentCountMismatchError, match="holds 30 documents, but 35 passages were streamed"):
        writer.write(stream)
    state = json.loads(checkpoint.read_text())
    assert state["completed"] is False
    assert state["count_check_failed"] == {"index_count": 30, "expected_count": 35}
    # the next run does not trust the failed load: it starts over rather than resuming after position 35
    again = ElasticsearchStreamingWriter(
        elasticsearch_url,
        es_index_name,
        StreamingWriterSettings(batch_size=10, checkpoint_path=checkpoint, progress=False),
    )
    report = again.write(documents)
    assert report.resumed_from == 0 and report.written == 30 and report.count_ok
    assert json.loads(checkpoint.read_text())["completed"] is True


def test_searching_an_index_that_was_never_built_is_an_error_and_creates_nothing(
    elasticsearch_url, es_client, es_index_name, tmp_path
):
    handle = IndexHandle(index_config_from_dict(es_config(elasticsearch_url, es_index_name, "sample", tmp_path)))
    with pytest.raises(
        IndexNotBuiltError, match=rf"index '{es_index_name}' at .* does not exist: build it first with `icr2 index"
    ):
        handle.retrieve("who won the first nobel prize in physics", method="bm25")
    assert not es_client.indices.exists(index=es_index_name)


def test_a_query_over_the_clause_limit_is_refused_naming_the_limit(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path
):
    documents = list(islice(KiltKnowledgeSource(sample_files.corpus).documents(), 20))
    ElasticsearchStreamingWriter(
        elasticsearch_url, es_index_name, StreamingWriterSettings(checkpoint_path=None, progress=False)
    ).write(documents)
    handle = IndexHandle(index_config_from_dict(es_config(elasticsearch_url, es_index_name, "sample", tmp_path)))
    query = " ".join(f"w{i:05d}" for i in range(17_000))  # ~119,000 characters, 17,000 distinct words
    assert len(query) > 100_000
    with pytest.raises(
        QueryTooLongError,
        match=r"more than the \d+ query clauses the node allows \(indices.query.bool.max_clause_count\)",
    ) as raised:
        handle.retrieve(query, method="bm25")
    assert raised.value.limit and raised.value.limit >= 1024
    assert handle.retrieve("nobel prize physics", method="bm25", top_k=3)  # the index still answers


class CountingEmbedder(PassageEmbedder):
    """The real MiniLM embedder, counting the texts it embeds."""

    embedded = 0

    def embed_texts(self, texts):
        CountingEmbedder.embedded += len(texts)
        return super().embed_texts(texts)


def test_a_resumed_load_with_embeddings_embeds_only_what_it_did_not_confirm(
    elasticsearch_url, es_client, es_index_name, sample_files, tmp_path, minilm
):
    corpus = tmp_path / "ks.jsonl"
    with open(sample_files.corpus, encoding="utf-8") as source, open(corpus, "w", encoding="utf-8") as out:
        out.writelines(islice(source, 300))
    config = index_config_from_dict(es_config(elasticsearch_url, es_index_name, str(corpus), tmp_path, embedding=True))
    handle = IndexHandle(config)
    total = sum(1 for _ in handle.source().passages())
    stop = total * 2 // 3

    class Interrupted(Exception):
        pass

    def interrupted(stream):
        for position, document in enumerate(stream):
            if position == stop:
                raise Interrupted
            yield document

    embedder = CountingEmbedder("all-minilm-l6-v2", batch_size=16)
    writer = ElasticsearchStreamingWriter.from_config(config, checkpoint_every=1, thread_count=1, progress=False)
    CountingEmbedder.embedded = 0
    with pytest.raises(Interrupted):
        writer.write(interrupted(handle.source().documents()), prepare=embedder.embed_stream)
    confirmed = json.loads((tmp_path / "ckpt.json").read_text())["position"]
    assert 50 <= confirmed <= stop, (confirmed, stop, total)

    CountingEmbedder.embedded = 0
    writer = ElasticsearchStreamingWriter.from_config(config, checkpoint_every=1, thread_count=1, progress=False)
    report = writer.write(handle.source().documents(), prepare=embedder.embed_stream)
    assert report.resumed_from == confirmed and report.passages_streamed == total and report.count_ok
    # the confirmed prefix was read, not embedded: exactly the rest of the stream went through the model
    assert CountingEmbedder.embedded == total - confirmed
    vectors = es_client.search(
        index=es_index_name, query={"exists": {"field": "embedding"}}, size=0, track_total_hits=True
    )
    assert vectors["hits"]["total"]["value"] == total
