"""IndexRetriever over a Haystack document store the user already has, and Haystack filters at run time.

Real passages (the 1,000 DPR Wikipedia passages in ../shared/data), Haystack's own InMemoryDocumentStore, the real
all-MiniLM-L6-v2 embeddings, and the real Elasticsearch node (tests marked elasticsearch; never a mock).
"""

import asyncio
import json
from pathlib import Path

import pytest
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from icr2_components.builders.corpus_builder import ConfounderAwareCorpusBuilder
from icr2_components.retrievers import IndexRetriever

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "dpr-wiki-sample-1000.jsonl"
QUERY = "Evan Morris lobbyist for Genentech and Roche in Washington"
GOLD_TITLE = "Evan Morris"


def _passages(limit: int = 1000) -> list[Document]:
    """The DPR sample as Haystack documents: the quoted first line is the title, the rest the text."""
    documents = []
    with DATA.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            title, _, text = record["contents"].partition("\n")
            documents.append(Document(id=f"dpr-{record['id']}", content=text, meta={"title": title.strip('"')}))
            if len(documents) == limit:
                break
    return documents


@pytest.fixture(scope="module")
def passages():
    return _passages()


@pytest.fixture(scope="module")
def memory_store(passages):
    store = InMemoryDocumentStore()
    store.write_documents(passages)
    return store


@pytest.mark.unit
def test_bm25_over_the_users_in_memory_store_finds_the_passage_and_tags_it(memory_store):
    retriever = IndexRetriever(document_store=memory_store, method="bm25", top_k=5, name="my_bm25")
    documents = retriever.run(query=QUERY)["documents"]
    assert documents[0].meta["title"] == GOLD_TITLE
    assert [d.meta["retrieval_rank"] for d in documents] == [1, 2, 3, 4, 5]
    assert {d.meta["retriever"] for d in documents} == {"my_bm25"}
    # the same ranking as Haystack's own retriever over the same store
    haystack_ids = [d.id for d in InMemoryBM25Retriever(memory_store, top_k=5).run(query=QUERY)["documents"]]
    assert [d.id for d in documents] == haystack_ids


@pytest.mark.unit
def test_filters_at_run_time_keep_only_matching_documents(memory_store, passages):
    retriever = IndexRetriever(document_store=memory_store, method="bm25", top_k=10)
    other_titles = sorted({p.meta["title"] for p in passages} - {GOLD_TITLE})[:3]
    filters = {"field": "meta.title", "operator": "in", "value": other_titles}
    documents = retriever.run(query=QUERY, filters=filters)["documents"]
    assert documents and {d.meta["title"] for d in documents} <= set(other_titles)
    assert GOLD_TITLE not in {d.meta["title"] for d in retriever.run(query=QUERY, filters=filters)["documents"]}
    # run_async gives the same documents
    awaited = asyncio.run(retriever.run_async(query=QUERY, filters=filters))["documents"]
    assert [d.id for d in awaited] == [d.id for d in documents]


def test_dense_and_hybrid_over_the_users_store_take_the_query_embedding(minilm, passages):
    chosen = passages[:200]
    vectors = minilm.encode([f"{p.meta['title']} {p.content}" for p in chosen], normalize_embeddings=True)
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents([Document(id=p.id, content=p.content, meta=p.meta, embedding=v.tolist())
                           for p, v in zip(chosen, vectors, strict=True)])
    embedding = minilm.encode(QUERY, normalize_embeddings=True).tolist()
    dense = IndexRetriever(document_store=store, method="dense", top_k=3).run(query=QUERY, query_embedding=embedding)
    assert dense["documents"][0].meta["title"] == GOLD_TITLE
    hybrid = IndexRetriever(document_store=store, method="hybrid", top_k=3)
    fused = hybrid.run(query=QUERY, query_embedding=embedding)["documents"]
    assert fused[0].meta["title"] == GOLD_TITLE and len(fused) == 3
    awaited = asyncio.run(hybrid.run_async(query=QUERY, query_embedding=embedding))["documents"]
    assert [d.id for d in awaited] == [d.id for d in fused]
    with pytest.raises(ValueError, match="needs the query's query_embedding"):
        hybrid.run(query=QUERY)


@pytest.mark.unit
def test_a_pipeline_with_the_users_store_round_trips_through_yaml(memory_store):
    pipeline = Pipeline()
    pipeline.add_component("retriever", IndexRetriever(document_store=memory_store, method="bm25", top_k=3))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["icr2_components.*"])
    retriever = loaded.get_component("retriever")
    assert isinstance(retriever.document_store, InMemoryDocumentStore) and retriever.index is None
    assert loaded.dumps() == pipeline.dumps()
    # an index config's retriever serialises as before: no document_store key
    assert "document_store" not in IndexRetriever().to_dict()["init_parameters"]


@pytest.mark.unit
def test_the_users_own_haystack_retriever_upstream_of_the_corpus_builder(memory_store):
    """The other way to bring a store: its own Haystack retriever feeds the corpus builder's ranked-list socket."""
    pipeline = Pipeline()
    pipeline.add_component("bm25", InMemoryBM25Retriever(memory_store, top_k=8))
    pipeline.add_component("builder", ConfounderAwareCorpusBuilder(retrievers=["bm25"], confounding_ratio=1.0,
                                                                   budget_passages=4))
    pipeline.connect("bm25.documents", "builder.bm25")
    result = pipeline.run({"bm25": {"query": QUERY}, "builder": {"query": QUERY}})
    corpus = result["builder"]["documents"]
    assert len(corpus) == 4 and GOLD_TITLE in {d.meta["title"] for d in corpus}


def test_bad_inputs_are_one_clear_line(memory_store):
    with pytest.raises(ValueError, match="InMemoryDocumentStore or an ElasticsearchDocumentStore, not dict"):
        IndexRetriever(document_store={"not": "a store"})
    with pytest.raises(ValueError, match="over a document store"):
        IndexRetriever(document_store=memory_store, method="bm25_title")
    retriever = IndexRetriever(document_store=memory_store, method="bm25")
    with pytest.raises(ValueError, match="must be a Haystack filter"):
        retriever.run(query=QUERY, filters={"title": GOLD_TITLE})
    with pytest.raises(ValueError, match="top_k must be a whole number >= 1"):
        retriever.run(query=QUERY, top_k=0)
    with pytest.raises(ValueError, match="non-empty query"):
        asyncio.run(retriever.run_async(query=" "))
    with pytest.raises(ValueError, match="query_embedding is for a document_store of your own"):
        IndexRetriever(index="kilt-sample", method="bm25").run(query=QUERY, query_embedding=[0.0] * 384)


def test_filters_reach_the_index_configs_store(sample_files, tmp_path):
    """The shipped sample config (in-memory store; BM25 only here, saved in tmp_path): a title filter keeps only
    that article's passages, run and run_async alike."""
    import yaml

    from icr2_components.resources import shipped_file

    config = yaml.safe_load(shipped_file("indexing", "kilt-sample").read_text())
    config["embedding"]["enabled"] = False
    config["store"]["persist_path"] = str(tmp_path / "kilt-sample-bm25.json")
    path = tmp_path / "kilt-sample-bm25.yaml"
    path.write_text(yaml.safe_dump(config))
    retriever = IndexRetriever(index=str(path), method="bm25", top_k=5)
    query = "who got the first nobel prize in physics"
    unfiltered = retriever.run(query=query)["documents"]
    title = unfiltered[1].meta["title"]
    filters = {"field": "meta.title", "operator": "==", "value": title}
    filtered = retriever.run(query=query, filters=filters)["documents"]
    assert filtered and {d.meta["title"] for d in filtered} == {title}
    awaited = asyncio.run(retriever.run_async(query=query, filters=filters))
    assert [d.id for d in awaited["documents"]] == [d.id for d in filtered]


@pytest.mark.elasticsearch
def test_the_users_elasticsearch_store_with_filters_sync_and_async(elasticsearch_url, es_index_name, passages):
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    store = ElasticsearchDocumentStore(hosts=elasticsearch_url, index=es_index_name, request_timeout=120)
    try:
        store.write_documents(passages[:300], refresh="true")
        retriever = IndexRetriever(document_store=store, method="bm25", top_k=5)
        documents = retriever.run(query=QUERY)["documents"]
        assert documents[0].meta["title"] == GOLD_TITLE
        others = sorted({p.meta["title"] for p in passages[:300]} - {GOLD_TITLE})[:5]
        filters = {"field": "meta.title", "operator": "in", "value": others}
        filtered = retriever.run(query=QUERY, filters=filters)["documents"]
        assert filtered and {d.meta["title"] for d in filtered} <= set(others)

        async def four_at_once():  # on the store's AsyncElasticsearch client, awaited together
            return await asyncio.gather(*(retriever.run_async(query=QUERY, filters=filters) for _ in range(4)))

        for result in asyncio.run(four_at_once()):
            assert [d.id for d in result["documents"]] == [d.id for d in filtered]
        loaded = IndexRetriever.from_dict(retriever.to_dict())
        assert [d.id for d in loaded.run(query=QUERY)["documents"]] == [d.id for d in documents]
    finally:
        store.close()
