"""The same sample, indexed into the embedded store and into a real Elasticsearch node, retrieves alike.

BM25, dense and hybrid retrieval are run for the same NQ questions on both stores; the gold passage is found,
and the top-10 overlap between stores is reported and bounded from below. Both stores rank BM25 with the same
analyzer (english), fields (content + title), formula (Lucene's) and k1/b (stores/text_analysis.py); what
differs is Lucene's lossy storage of document lengths and the order of ties. Elasticsearch's dense search is
approximate (HNSW). Measured on 30 NQ questions: BM25 0.99, dense 0.98, hybrid 0.98 mean top-10 overlap (BM25
0.76 and hybrid 0.86 before both stores were given one analyzer and formula), with the same gold recall on
both stores.

Elasticsearch is given the embedded index's own passages, vectors and stored token counts (the sample's cached
in-memory index, written once by the session fixture ``es_sample_index`` that
tests/test_pipelines_on_elasticsearch.py shares): the vectors are computed once, and what is
compared is the two stores' retrieval. Building an Elasticsearch index from the corpus (reading, embedding,
resuming) is tested in tests/test_elasticsearch_shipped_config.py and tests/test_elasticsearch_one_corpus.py.
"""


import pytest

from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.stores import IndexHandle, load_index_config, open_index

pytestmark = pytest.mark.elasticsearch

QUESTIONS = 30


@pytest.fixture(scope="module")
def both_stores(es_sample_index):
    in_memory = open_index("indexing/kilt-sample.yaml")
    elastic = IndexHandle(load_index_config(es_sample_index[0]))
    assert elastic.count() == in_memory.count()
    return in_memory, elastic


@pytest.fixture(scope="module")
def questions(both_stores, sample_files):
    in_memory, _ = both_stores
    span_index = PassageSpanIndex.from_documents(in_memory.document_store.storage.values())
    return [
        (t, set(span_index.gold_passage_ids(t.provenance)))
        for t in read_kilt_tasks(sample_files.tasks, limit=QUESTIONS)
    ]


@pytest.mark.parametrize(
    "method,minimum_overlap,minimum_recall", [("bm25", 0.95, 0.8), ("dense", 0.9, 0.85), ("hybrid", 0.9, 0.85)]
)
def test_both_stores_return_the_same_passages(both_stores, questions, method, minimum_overlap, minimum_recall):
    in_memory, elastic = both_stores
    overlaps, hits = [], {"in_memory": 0, "elasticsearch": 0}
    for task, gold in questions:
        ours = [d.id for d in in_memory.retrieve(task.input, method=method, top_k=10)]
        theirs = [d.id for d in elastic.retrieve(task.input, method=method, top_k=10)]
        assert len(theirs) == 10
        overlaps.append(len(set(ours) & set(theirs)) / 10)
        hits["in_memory"] += bool(gold & set(ours))
        hits["elasticsearch"] += bool(gold & set(theirs))
    mean_overlap = sum(overlaps) / len(overlaps)
    print(
        f"\n{method}: mean top-10 overlap in-memory vs Elasticsearch = {mean_overlap:.2f} over {len(questions)} NQ "
        "questions; "
        f"gold recall@10 in-memory {hits['in_memory'] / len(questions):.2f}, Elasticsearch "
        f"{hits['elasticsearch'] / len(questions):.2f}"
    )
    assert mean_overlap >= minimum_overlap
    assert hits["elasticsearch"] / len(questions) >= minimum_recall
    assert hits["in_memory"] / len(questions) >= minimum_recall


def test_top_hit_agrees_for_an_unambiguous_question(both_stores):
    in_memory, elastic = both_stores
    query = "who got the first nobel prize in physics"
    for method in ("bm25", "dense", "hybrid"):
        assert (
            in_memory.retrieve(query, method=method, top_k=1)[0].id
            == elastic.retrieve(query, method=method, top_k=1)[0].id
        )
