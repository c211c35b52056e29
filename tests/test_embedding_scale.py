"""Embeddings at scale, on the real bundled all-MiniLM-L6-v2 and real sample passages:
ONNX / int8 / OpenVINO vectors against ``SentenceTransformer.encode``, the resumable ``icr2 embed`` pass, and a
store written from its shards against one embedded directly (in memory and on the real Elasticsearch node).

Speed is measured in bench/embedding.py, never here.
"""

from __future__ import annotations

import json
import uuid
from itertools import islice

import numpy as np
import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.models.sentence_backends import (
    EmbeddingBackendError,
    ProcessPoolEncoder,
    ensure_onnx_export,
    sentence_encoder,
)
from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.config import ConfigError
from icr2_components.stores.embedding import PassageEmbedder, text_to_embed
from icr2_components.stores.embedding_shards import (
    MissingVectorError,
    ShardsMismatchError,
    ShardVectors,
    embed_to_shards,
    read_manifest,
)

# the first 40 articles of the sample: a few dozen real passages, enough for several shards
ARTICLES = 40
# int8 (dynamic, per-channel weights) against fp32 on real passages; measured: mean 0.994, min 0.990
INT8_MIN_COSINE = 0.98
INT8_MEAN_COSINE = 0.99


@pytest.fixture(scope="module")
def passages(sample_files):
    documents = list(islice(KiltKnowledgeSource(sample_files.corpus).documents(), 64))
    return [text_to_embed(document, ["title"]) for document in documents]


@pytest.fixture(scope="module")
def fp32_vectors(passages):
    return sentence_encoder("all-minilm-l6-v2", backend="fp32", device="cpu").encode(passages, 16)


def config_dict(tmp_path, name: str, backend: str = "onnx", **embedding) -> dict:
    return {
        "name": name,
        "store": {"type": "in_memory", "persist_path": str(tmp_path / f"{name}.json")},
        "corpus": {"path": "sample", "max_articles": ARTICLES},
        "embedding": {"backend": backend, "batch_size": 16, "threads": 1, **embedding},
    }


def corpus_ids(config) -> list[str]:
    from icr2_components.stores.embedding_shards import corpus_source

    return [document.id for document in corpus_source(config).documents()]


# -- backends ----------------------------------------------------------------------------------------------------


def test_the_onnx_export_is_local_and_cached(passages):
    folder = ensure_onnx_export("all-minilm-l6-v2")
    assert sorted(path.name for path in folder.glob("*.onnx")) == ["model.onnx", "model_plain.onnx", "model_qint8.onnx"]
    meta = json.loads((folder / "export.json").read_text())
    assert (
        meta["pooling"] == "mean" and meta["normalize"] and meta["dimension"] == 384 and meta["max_seq_length"] == 256
    )
    # int8 weights: about a quarter of the fp32 file
    assert (folder / "model_qint8.onnx").stat().st_size < 0.35 * (folder / "model.onnx").stat().st_size
    assert ensure_onnx_export("all-minilm-l6-v2") == folder  # the second call finds it


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_exported_fp32_backends_match_sentence_transformers(backend, passages, fp32_vectors):
    vectors = sentence_encoder("all-minilm-l6-v2", backend=backend, threads=1).encode(passages, 16)
    assert vectors.shape == fp32_vectors.shape == (len(passages), 384)
    cosine = (vectors * fp32_vectors).sum(axis=1)
    assert cosine.min() >= 0.99, (backend, cosine.min())
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_int8_stays_within_the_stated_tolerance(passages, fp32_vectors):
    vectors = sentence_encoder("all-minilm-l6-v2", backend="onnx-int8", threads=1).encode(passages, 16)
    cosine = (vectors * fp32_vectors).sum(axis=1)
    assert cosine.min() >= INT8_MIN_COSINE and cosine.mean() >= INT8_MEAN_COSINE, (cosine.min(), cosine.mean())
    # close, but not the fp32 vectors: the quantised model really runs
    assert cosine.mean() < 0.99999


def test_batch_size_and_order_do_not_change_the_vectors(passages):
    encoder = sentence_encoder("all-minilm-l6-v2", backend="onnx", threads=1)
    together = encoder.encode(passages[:20], 20)
    one_by_one = np.stack([encoder.encode([text], 1)[0] for text in passages[:20]])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "fp32"])
def test_a_two_process_pool_gives_the_in_process_vectors(backend, passages):
    """fp32 goes through sentence-transformers' own multi-process pool, ONNX through a spawn pool of sessions.

    (int8 is left out on purpose: dynamic quantisation scales activations per batch, so its vectors move with the
    batch a passage lands in, within the tolerance tested above, and a pool batches differently.)"""
    expected = sentence_encoder("all-minilm-l6-v2", backend=backend, device="cpu", threads=1).encode(passages[:24], 8)
    with ProcessPoolEncoder("all-minilm-l6-v2", backend=backend, devices=["cpu", "cpu"], threads_per_process=1) as pool:
        vectors = pool.encode(passages[:24], 8)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_the_cuda_path_of_the_onnx_backend_names_what_it_needs():
    """No GPU here: the CUDA provider's absence is a one-line error naming onnxruntime-gpu (the code path is kept)."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        encoder = sentence_encoder("all-minilm-l6-v2", backend="onnx", device="cuda:0")
        assert encoder.session.get_providers()[0] == "CUDAExecutionProvider"
    else:
        with pytest.raises(EmbeddingBackendError, match="onnxruntime-gpu"):
            sentence_encoder("all-minilm-l6-v2", backend="onnx", device="cuda:0")


def test_a_pool_over_devices_is_what_the_config_asks_for():
    embedder = PassageEmbedder(devices=["cuda:0", "cuda:1"], processes=2)
    assert embedder.pool_devices == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    assert PassageEmbedder(processes=3).pool_devices == ["cpu", "cpu", "cpu"]
    assert PassageEmbedder().pool_devices == ["cpu"]  # no pool


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ({"backend": "fp16"}, "embedding.backend must be one of fp32, onnx, onnx-int8, openvino"),
        ({"processes": 0}, r"section 'embedding' of .*: key 'processes' is 0 \(an integer\); expected an integer >= 1"),
        ({"threads": 0}, r"key 'threads' is 0 \(an integer\); expected an integer >= 1 or null\."),
        ({"devices": []}, "embedding.devices must list at least one device"),
        ({"device": "cpu", "devices": ["cpu"]}, "not both"),
        ({"devices": ["tpu:0"]}, "device must be cpu, cuda"),
        ({"devices": "cuda:0"}, "devices"),
    ],
)
def test_embedding_settings_are_validated(embedding, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        index_config_from_dict(config_dict(tmp_path, "bad", **embedding))


# -- the resumable pass ------------------------------------------------------------------------------------------


def test_the_embed_pass_resumes_after_an_interruption_without_recomputing(tmp_path):
    config = index_config_from_dict(config_dict(tmp_path, "shards"))
    ids = corpus_ids(config)
    total = len(ids)
    assert total > 40, total
    out = tmp_path / "vectors"

    first = embed_to_shards(config, out, shard_size=8, max_shards=2, progress=False)
    assert (first.passages_embedded, first.resumed_passages, first.shards_written, first.complete) == (16, 0, 2, False)
    assert first.skips["total"] == 0
    # a run killed while writing its third shard: a stray file that the manifest does not list
    (out / "shard-00002.npy").write_bytes(b"half a shard")

    second = embed_to_shards(config, out, shard_size=8, progress=False)
    assert second.resumed_passages == 16 and second.passages_embedded == total - 16
    assert second.shards_total == -(-total // 8) and second.passages_total == total and second.complete

    third = embed_to_shards(config, out, shard_size=8, progress=False)
    assert (third.passages_embedded, third.resumed_passages, third.shards_written) == (0, total, 0)

    manifest = read_manifest(out)
    written = [pid for shard in manifest["shards"] for pid in (out / shard["ids"]).read_text().splitlines()]
    assert written == ids and len(set(written)) == total  # every passage once, in corpus order

    # the same vectors as one uninterrupted pass, and as the model itself
    straight = embed_to_shards(config, tmp_path / "straight", shard_size=8, progress=False)
    assert straight.passages_embedded == total and straight.complete
    resumed, uninterrupted = ShardVectors(out), ShardVectors(tmp_path / "straight")
    stacked = np.stack([resumed.vector(pid) for pid in ids])
    np.testing.assert_allclose(stacked, np.stack([uninterrupted.vector(pid) for pid in ids]), atol=1e-5)
    # read out of order (a writer resuming mid-corpus, or another order altogether): the same vectors
    middle = ShardVectors(out)
    np.testing.assert_array_equal(middle.vector(ids[total // 2]), stacked[total // 2])
    backwards = ShardVectors(out)
    np.testing.assert_array_equal(np.stack([backwards.vector(pid) for pid in reversed(ids)])[::-1], stacked)
    with pytest.raises(MissingVectorError, match="no-such-passage"):
        ShardVectors(out).vector("no-such-passage")

    from icr2_components.stores.embedding_shards import corpus_source

    documents = list(islice(corpus_source(config).documents(), 5))
    direct = sentence_encoder("all-minilm-l6-v2", backend="onnx", threads=1).encode(
        [text_to_embed(d, ["title"]) for d in documents], 16
    )
    np.testing.assert_allclose(stacked[:5], direct, atol=1e-5)


def test_a_folder_of_another_pass_is_refused(tmp_path):
    out = tmp_path / "vectors"
    embed_to_shards(index_config_from_dict(config_dict(tmp_path, "a")), out, shard_size=8, max_shards=1, progress=False)
    with pytest.raises(ShardsMismatchError, match=r"backend: folder 'onnx', config 'onnx-int8'"):
        embed_to_shards(
            index_config_from_dict(config_dict(tmp_path, "a", backend="onnx-int8")), out, shard_size=8, progress=False
        )
    with pytest.raises(ShardsMismatchError, match=r"shard_size: folder 8, config 16"):
        embed_to_shards(index_config_from_dict(config_dict(tmp_path, "a")), out, shard_size=16, progress=False)


def test_icr2_embed_on_the_command_line(tmp_path, capsys):
    import yaml

    from icr2_components.cli import main

    config_path = tmp_path / "index.yaml"
    config_path.write_text(yaml.safe_dump(config_dict(tmp_path, "cli")))
    out, report = tmp_path / "vectors", tmp_path / "report.json"
    args = [
        "embed",
        str(config_path),
        "--out",
        str(out),
        "--shard-size",
        "10",
        "--no-progress",
        "--report",
        str(report),
    ]
    assert main([*args, "--max-shards", "1"]) == 0
    assert "not finished" in capsys.readouterr().out
    assert json.loads(report.read_text())["passages_embedded"] == 10
    assert main(args) == 0
    data = json.loads(report.read_text())
    total = len(corpus_ids(index_config_from_dict(config_dict(tmp_path, "cli"))))
    assert (data["resumed_passages"], data["passages_embedded"], data["complete"]) == (10, total - 10, True)
    assert main(["embed", str(config_path), "--out", str(out), "--shard-size", "0"]) == 1
    assert "--shard-size must be >= 1" in capsys.readouterr().err


# -- vectors from shards into a store ----------------------------------------------------------------------------


def test_an_in_memory_store_written_from_shards_equals_one_embedded_directly(tmp_path):
    out = tmp_path / "vectors"
    embed_to_shards(index_config_from_dict(config_dict(tmp_path, "pass")), out, shard_size=16, progress=False)

    direct = IndexHandle(index_config_from_dict(config_dict(tmp_path, "direct")))
    direct_report = direct.build(progress=False)
    from_shards = IndexHandle(index_config_from_dict(config_dict(tmp_path, "from-shards", vectors_dir=str(out))))
    shards_report = from_shards.build(progress=False)

    assert (
        shards_report.passages_streamed == direct_report.passages_streamed == from_shards.count()
        and shards_report.count_ok
    )
    # no passage went through the model: the shards gave every vector
    assert (
        from_shards._embedder._encoder is None
        and from_shards._embedder.passages_from_shards == shards_report.passages_streamed
    )
    expected = {d.id: d.embedding for d in direct.document_store.filter_documents()}
    got = {d.id: d.embedding for d in from_shards.document_store.filter_documents()}
    assert got.keys() == expected.keys()
    np.testing.assert_allclose(
        np.array([got[k] for k in sorted(got)]), np.array([expected[k] for k in sorted(expected)]), atol=1e-5
    )
    # queries still go through the model, and dense retrieval agrees
    query = "who won the nobel prize"
    assert [d.id for d in from_shards.retrieve(query, method="dense", top_k=5)] == [
        d.id for d in direct.retrieve(query, method="dense", top_k=5)
    ]


def test_a_passage_missing_from_the_shards_is_an_error_naming_the_pass(tmp_path):
    out = tmp_path / "vectors"
    embed_to_shards(
        index_config_from_dict(config_dict(tmp_path, "pass")), out, shard_size=8, max_shards=1, progress=False
    )
    handle = IndexHandle(index_config_from_dict(config_dict(tmp_path, "partial", vectors_dir=str(out))))
    with pytest.raises(MissingVectorError, match=r"8 passages in 1 shards, unfinished.*icr2 embed CONFIG --out"):
        handle.build(progress=False)
    with pytest.raises(ShardsMismatchError, match="backend: shards 'onnx', config 'fp32'"):
        IndexHandle(index_config_from_dict(config_dict(tmp_path, "other", backend="fp32", vectors_dir=str(out))))


@pytest.mark.elasticsearch
def test_an_elasticsearch_index_written_from_shards_equals_one_embedded_directly(
    elasticsearch_url, es_client, tmp_path
):
    out = tmp_path / "vectors"
    embed_to_shards(index_config_from_dict(config_dict(tmp_path, "pass")), out, shard_size=16, progress=False)
    stem = f"icr2-embed-scale-{uuid.uuid4().hex[:8]}"
    names = [f"{stem}-direct", f"{stem}-shards"]
    try:
        handles = []
        for name, extra in zip(names, ({}, {"vectors_dir": str(out)}), strict=True):
            data = config_dict(tmp_path, name, **extra)
            data["store"] = {
                "type": "elasticsearch",
                "hosts": elasticsearch_url,
                "index": name,
                "max_retries": 1,
                "request_timeout": 30,
            }
            data["writer"] = {"batch_size": 20, "checkpoint_path": str(tmp_path / f"{name}.ckpt.json")}
            handle = IndexHandle(index_config_from_dict(data))
            report = handle.build(progress=False)
            assert report.count_ok and report.documents_in_store == report.passages_streamed
            handles.append(handle)
        assert handles[1]._embedder._encoder is None  # vectors came from the shards
        vectors = []
        for name in names:
            es_client.indices.refresh(index=name)
            hits = es_client.search(index=name, query={"match_all": {}}, size=1000, source_includes=["embedding"])[
                "hits"
            ]["hits"]
            vectors.append({hit["_id"]: hit["_source"]["embedding"] for hit in hits})
        assert vectors[0].keys() == vectors[1].keys() and len(vectors[0]) == handles[0].count()
        keys = sorted(vectors[0])
        np.testing.assert_allclose(
            np.array([vectors[1][k] for k in keys]), np.array([vectors[0][k] for k in keys]), atol=1e-5
        )
    finally:
        for name in names:
            es_client.indices.delete(index=name, ignore_unavailable=True)


@pytest.mark.elasticsearch
def test_a_resumed_elasticsearch_load_takes_the_rest_of_its_vectors_from_the_shards(
    elasticsearch_url, es_client, tmp_path
):
    """The writer skips its confirmed prefix, then asks the shard embedder from mid-corpus on: no model, exact count."""
    from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter

    out = tmp_path / "vectors"
    embed_to_shards(index_config_from_dict(config_dict(tmp_path, "pass")), out, shard_size=8, progress=False)
    name = f"icr2-embed-scale-{uuid.uuid4().hex[:8]}-resume"
    data = config_dict(tmp_path, name, vectors_dir=str(out))
    data["store"] = {
        "type": "elasticsearch",
        "hosts": elasticsearch_url,
        "index": name,
        "max_retries": 1,
        "request_timeout": 30,
    }
    data["writer"] = {"batch_size": 10, "checkpoint_path": str(tmp_path / "ckpt.json")}
    config = index_config_from_dict(data)
    handle = IndexHandle(config)
    ids = corpus_ids(config)
    stop = len(ids) * 2 // 3

    class Interrupted(Exception):
        pass

    def interrupted(stream):
        for position, document in enumerate(stream):
            if position == stop:
                raise Interrupted
            yield document

    try:
        writer = ElasticsearchStreamingWriter.from_config(config, checkpoint_every=1, thread_count=1, progress=False)
        with pytest.raises(Interrupted):
            writer.write(interrupted(handle.source().documents()), prepare=handle._embedder.embed_stream)
        confirmed = json.loads((tmp_path / "ckpt.json").read_text())["position"]
        assert 0 < confirmed <= stop
        before = handle._embedder.passages_from_shards
        writer = ElasticsearchStreamingWriter.from_config(config, checkpoint_every=1, thread_count=1, progress=False)
        report = writer.write(handle.source().documents(), prepare=handle._embedder.embed_stream)
        assert report.resumed_from == confirmed and report.passages_streamed == len(ids) and report.count_ok
        assert (
            handle._embedder.passages_from_shards - before == len(ids) - confirmed and handle._embedder._encoder is None
        )
        es_client.indices.refresh(index=name)
        hits = es_client.search(index=name, query={"match_all": {}}, size=1000, source_includes=["embedding"])["hits"][
            "hits"
        ]
        shards = ShardVectors(out)
        assert sorted(hit["_id"] for hit in hits) == sorted(ids)
        for hit in hits:
            np.testing.assert_allclose(hit["_source"]["embedding"], shards.vector(hit["_id"]), atol=1e-6)
    finally:
        es_client.indices.delete(index=name, ignore_unavailable=True)
