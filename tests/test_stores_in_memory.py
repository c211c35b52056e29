"""The embedded (in-memory) store: config validation, building the sample index, retrieving gold passages."""

import pytest
import yaml

from icr2_components.errors import ConfigError
from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.pipeline_loading import loads_pipeline
from icr2_components.retrievers import IndexRetriever
from icr2_components.stores import index_config_from_dict, load_index_config, open_index
from icr2_components.stores.retrieval_methods import reciprocal_rank_fusion

SAMPLE_CONFIG = "indexing/kilt-sample.yaml"


@pytest.fixture(scope="module")
def sample_index():
    return open_index(SAMPLE_CONFIG)


@pytest.fixture(scope="module")
def nq_tasks_with_gold(sample_index, sample_files):
    span_index = PassageSpanIndex.from_documents(sample_index.document_store.storage.values())
    tasks = list(read_kilt_tasks(sample_files.tasks, limit=60))
    return [(task, set(span_index.gold_passage_ids(task.provenance))) for task in tasks]


@pytest.mark.unit
def test_unknown_config_keys_are_refused_with_the_allowed_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['batchsize'\] in section 'writer'"):
        index_config_from_dict({"writer": {"batchsize": 10}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['stores'\]"):
        index_config_from_dict({"stores": {}})
    with pytest.raises(ConfigError, match=r"store\.type"):
        index_config_from_dict({"store": {"type": "faiss"}})
    # each store type reads its own keys: an Elasticsearch key on an in-memory store is not silently ignored
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['hosts'\] in section 'store' \(type in_memory\)"):
        index_config_from_dict(
            {"store": {"type": "in_memory", "hosts": "http://127.0.0.1:9200"}, "corpus": {"path": "sample"}}
        )
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"corpus": {"passage_words": 0}}))
    with pytest.raises(ConfigError, match="passage_words"):
        load_index_config(path)


def test_sample_index_holds_every_passage_with_embeddings(sample_index):
    store = sample_index.document_store
    count = store.count_documents()
    assert count > 3000
    doc = next(iter(store.storage.values()))
    assert len(doc.embedding) == 384
    assert {
        "wikipedia_id",
        "title",
        "start_paragraph_id",
        "end_paragraph_id",
        "start_character",
        "end_character",
    } <= set(doc.meta)


@pytest.mark.parametrize("method,minimum_recall", [("bm25", 0.7), ("dense", 0.85), ("hybrid", 0.85)])
def test_retrieval_finds_the_gold_passage_of_nq_questions(sample_index, nq_tasks_with_gold, method, minimum_recall):
    hits = 0
    for task, gold in nq_tasks_with_gold:
        assert gold, f"{task.id} maps to no passage"
        ids = [d.id for d in sample_index.retrieve(task.input, method=method, top_k=10)]
        assert len(ids) == 10 and len(set(ids)) == 10
        hits += bool(gold & set(ids))
    recall = hits / len(nq_tasks_with_gold)
    print(f"{method}: gold recall@10 on {len(nq_tasks_with_gold)} NQ questions = {recall:.2f}")
    assert recall >= minimum_recall


@pytest.mark.unit
def test_reciprocal_rank_fusion_rewards_agreement():
    from haystack import Document

    a, b, c, d = (Document(id=i, content=i) for i in "abcd")
    fused = reciprocal_rank_fusion([[a, b, c], [b, c, a]], top_k=3)
    assert [doc.id for doc in fused] == ["b", "a", "c"]
    # Haystack's DocumentJoiner: Cormack et al.'s sum of 1 / (60 + rank), scaled by 61 / (number of lists)
    assert fused[0].score == pytest.approx((1 / 62 + 1 / 61) * 61 / 2)
    # equal fused scores (first in one list each) are ordered by id, whichever list came first
    assert [doc.id for doc in reciprocal_rank_fusion([[c, d], [a, b]], top_k=4)] == ["a", "c", "b", "d"]
    assert [doc.id for doc in reciprocal_rank_fusion([[a, b], [c, d]], top_k=2)] == ["a", "c"]


@pytest.mark.unit
def test_retrieval_rejects_bad_requests(sample_index):
    with pytest.raises(ValueError, match="non-empty"):
        sample_index.retrieve("  ")
    with pytest.raises(ValueError, match="Unknown retrieval method"):
        sample_index.retrieve("x", method="splade")
    with pytest.raises(ValueError, match="top_k"):
        sample_index.retrieve("x", top_k=0)


def test_random_documents_are_seeded_and_respect_exclusions(sample_index):
    first = [d.id for d in sample_index.random_documents(20, seed=3)]
    assert first == [d.id for d in sample_index.random_documents(20, seed=3)]
    assert first != [d.id for d in sample_index.random_documents(20, seed=4)]
    excluded = set(first[:10])
    assert not excluded & {d.id for d in sample_index.random_documents(50, seed=3, exclude_ids=excluded)}


def test_index_retriever_runs_in_a_yaml_pipeline():
    from haystack import Pipeline

    pipeline = Pipeline()
    pipeline.add_component("retriever", IndexRetriever(index=SAMPLE_CONFIG, method="bm25", top_k=3, name="bm25"))
    loaded = loads_pipeline(pipeline.dumps())
    documents = loaded.run({"retriever": {"query": "who got the first nobel prize in physics"}})["retriever"][
        "documents"
    ]
    assert documents[0].meta["title"] == "List of Nobel laureates in Physics"
    assert [d.meta["retrieval_rank"] for d in documents] == [1, 2, 3]
    assert {d.meta["retriever"] for d in documents} == {"bm25"}
    with pytest.raises(ValueError, match="method"):
        IndexRetriever(method="colbert")


def test_a_store_past_its_measured_size_warns_once_and_says_what_to_use(tmp_path, caplog, sample_files):
    """The real limit: 200,001 passages (the sample's real passages, each cut to its first words and repeated under
    new ids so the store's BM25 stays cheap; no embeddings) warn exactly once, at the passage past 200,000, with the
    measured RAM per passage and what it comes to, and every passage is kept."""
    import logging
    from itertools import cycle, islice

    from haystack import Document

    from icr2_components.kilt import KiltKnowledgeSource
    from icr2_components.stores import IndexHandle, in_memory_backend

    limit = in_memory_backend.LARGE_STORE_PASSAGES
    assert limit == 200_000 and in_memory_backend.RAM_BYTES_PER_PASSAGE == 28_000
    passages = [" ".join((d.content or "").split()[:6]) for d in KiltKnowledgeSource(sample_files.corpus).documents()]
    assert len(passages) > 3000
    documents = [Document(id=f"p{i}", content=text) for i, text in enumerate(islice(cycle(passages), limit + 1))]
    config = index_config_from_dict({
        "name": "big", "store": {"type": "in_memory", "persist_path": str(tmp_path / "index.json")},
        "corpus": {"path": "sample"}, "embedding": {"enabled": False}, "writer": {"batch_size": 20_000},
    })
    with caplog.at_level(logging.WARNING, logger="icr2_components.stores.in_memory_backend"):
        report = IndexHandle(config).build(progress=False, documents=documents)
    assert report.documents_in_store == limit + 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "icr2_components.stores.in_memory_backend"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("The in-memory store 'big' passes 200,000 passages: it holds about 28 KB of RAM "
                                  "per passage (bench/scale.py), so ~5.2 GiB at this size")
    assert "use Elasticsearch (store.type: elasticsearch" in warnings[0]
