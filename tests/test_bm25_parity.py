"""BM25 on the in-memory store and on a real Elasticsearch node ranks alike (within 0.01 nDCG@10).

The whole NQ sample as ``bench/retrieval_quality.py --make-from-sample`` writes it as a BEIR folder (3,717
passages, the first 300 NQ questions, the gold passages as relevant; one dataset), indexed without embeddings
into both stores with the same analyzer, fields and k1/b. Measured: english 0.849 in memory and on
Elasticsearch; standard 0.798 in memory, 0.801 on Elasticsearch (ties are ordered differently: by id in memory,
by index order in Elasticsearch).
"""

from __future__ import annotations

import math
import uuid

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.text_analysis import TextAnalyzer, index_analyzer

pytestmark = pytest.mark.elasticsearch

QUERIES = 300


def _ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1 / math.log2(rank + 2) for rank, doc_id in enumerate(ranked[:10]) if doc_id in relevant)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(relevant), 10)))
    return dcg / ideal if ideal else 0.0


@pytest.fixture(scope="module")
def nq_sample(sample_files):
    passages = list(KiltKnowledgeSource(sample_files.corpus).passages())
    span_index = PassageSpanIndex.from_passages(passages)
    documents = list(KiltKnowledgeSource(sample_files.corpus).documents())
    judged = []
    for task in read_kilt_tasks(sample_files.tasks, limit=QUERIES):
        gold = set(span_index.gold_passage_ids(task.provenance))
        if gold:
            judged.append((task.input, gold))
    return documents, judged


def _handle(store: str, analyzer: str, elasticsearch_url: str, tmp_path, index: str) -> IndexHandle:
    sections = {
        "in_memory": {"persist_path": str(tmp_path / f"{analyzer}.json")},
        "elasticsearch": {"hosts": elasticsearch_url, "index": index},
    }
    return IndexHandle(index_config_from_dict({
        "name": f"bm25-parity-{analyzer}",
        "store": {"type": store, "analyzer": analyzer, **sections[store]},
        "corpus": {"path": "sample"},
        "embedding": {"enabled": False},
        "writer": {"checkpoint_path": str(tmp_path / f"{analyzer}-checkpoint.json")},
    }))


@pytest.mark.parametrize("analyzer", ["english", "standard"])
def test_bm25_ndcg_at_10_of_both_stores_within_0_01_on_the_whole_nq_sample(
    nq_sample, elasticsearch_url, es_client, tmp_path, analyzer
):
    documents, judged = nq_sample
    index = f"icr2-bm25-parity-{analyzer}-{uuid.uuid4().hex[:8]}"
    ndcg = {}
    try:
        for store in ("in_memory", "elasticsearch"):
            handle = _handle(store, analyzer, elasticsearch_url, tmp_path, index)
            report = handle.build(progress=False, documents=iter(documents))
            assert report.documents_in_store == len(documents)
            scores = [
                _ndcg_at_10([d.id for d in handle.retrieve(query, method="bm25", top_k=10)], gold)
                for query, gold in judged
            ]
            ndcg[store] = sum(scores) / len(scores)
        assert index_analyzer(es_client, index) == analyzer
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
    print(f"\n{analyzer}: BM25 nDCG@10 in-memory {ndcg['in_memory']:.4f}, Elasticsearch {ndcg['elasticsearch']:.4f} "
          f"({len(judged)} NQ-sample queries, {len(documents)} passages)")
    assert abs(ndcg["in_memory"] - ndcg["elasticsearch"]) <= 0.01
    assert ndcg["in_memory"] > 0.75  # a sanity floor: BM25 finds most gold passages of the sample's NQ questions


def test_elasticsearch_searches_the_title_as_a_field_and_still_filters_it_exactly(
    nq_sample, elasticsearch_url, es_client, tmp_path
):
    documents, _ = nq_sample
    analyze = TextAnalyzer("english")
    # a real passage whose text never names its article's subject: only the title field can bring it up
    passage = next(
        d
        for d in documents
        if len(analyze(d.meta["title"])) >= 2 and not set(analyze(d.meta["title"])) & set(analyze(d.content))
    )
    index = f"icr2-bm25-title-{uuid.uuid4().hex[:8]}"
    try:
        handle = _handle("elasticsearch", "english", elasticsearch_url, tmp_path, index)
        handle.build(progress=False, documents=iter([*documents[:600], passage]))
        mapping = es_client.indices.get_mapping(index=index).body[index]["mappings"]["properties"]
        assert mapping["content"] == {"type": "text", "analyzer": "english"}
        assert mapping["title"]["type"] == "keyword" and mapping["title"]["fields"]["text"]["analyzer"] == "english"
        found = handle.retrieve(passage.meta["title"], method="bm25", top_k=50)
        assert passage.id in [d.id for d in found]
        assert all(d.meta["title"] for d in found) and all(isinstance(d.score, float) for d in found)
        exact = handle.retrieve(passage.meta["title"], method="bm25", top_k=50,
                                filters={"field": "meta.title", "operator": "==", "value": passage.meta["title"]})
        assert exact and {d.meta["title"] for d in exact} == {passage.meta["title"]}
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
