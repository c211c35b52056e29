"""The corpus-in-context YAML pipelines, loaded with load_pipeline (allowlisted) and run on real data."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.tasks import PassageSpanIndex, read_kilt_tasks
from icr2_components.pipeline_loading import load_pipeline

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = [
    "cic_rag_lost_in_the_middle",
    "cic_recency_query_aware",
    "cic_benchmark_gold_position",
    "cic_benchmark_shuffled_reverse",
]


@pytest.fixture(scope="module")
def nq(sample_files):
    """Real passages, the first NQ task with its gold passages and BM25 candidates (retrieved with q + a)."""
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    documents = list(KiltKnowledgeSource(sample_files.corpus).documents())
    by_id = {d.id: d for d in documents}
    spans = PassageSpanIndex.from_documents(documents)
    store = InMemoryDocumentStore()
    store.write_documents(documents)
    task = next(read_kilt_tasks(sample_files.tasks))
    gold = [by_id[i] for i in spans.gold_passage_ids(task.provenance)]
    bm25 = InMemoryBM25Retriever(store).run(query=task.input + " " + " ".join(task.answers), top_k=40)["documents"]
    return {"documents": documents, "task": task, "gold": gold, "bm25": bm25}


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.unit
def test_pipeline_loads_and_round_trips(name):
    pipeline = load_pipeline(ROOT / "pipelines" / f"{name}.yaml")
    assert load_pipeline(ROOT / "pipelines" / f"{name}.yaml").to_dict() == pipeline.to_dict()
    from icr2_components.pipeline_loading import loads_pipeline

    again = loads_pipeline(pipeline.dumps()).to_dict()
    data = pipeline.to_dict()
    assert again["components"] == data["components"]
    key = lambda c: (c["sender"], c["receiver"])  # noqa: E731 - the connection order is not part of the graph
    assert sorted(again["connections"], key=key) == sorted(data["connections"], key=key)


@pytest.mark.parametrize("position", [1, 4, 10])
@pytest.mark.unit
def test_gold_position_pipeline_puts_the_gold_passage_at_the_position(nq, position):
    pipeline = load_pipeline(ROOT / "pipelines" / "cic_benchmark_gold_position.yaml")
    task, gold = nq["task"], nq["gold"]
    result = pipeline.run(
        {
            "corpus_builder": {
                "query": task.input,
                "answers": task.answers,
                "gold_documents": gold,
                "bm25": nq["bm25"][:20],
                "dense": nq["bm25"][20:],
            },
            "reorderer": {"position": position},
            "prompt_builder": {"query": task.input},
        },
        include_outputs_from={"reorderer"},
    )
    ordered = result["reorderer"]["documents"]
    assert len(ordered) == 10
    assert ordered[position - 1].id == gold[0].id
    shown = result["prompt_builder"]["passage_ids"]
    content = result["prompt_builder"]["prompt"][-1].text
    gold_pid = ordered[position - 1].meta["passage_id"]
    assert shown[position - 1] == gold_pid and f"ID: {gold_pid}\nTitle: {gold[0].meta['title']}" in content
    assert content.rstrip().endswith(f"Question: {task.input}\nAnswer:")


def test_shuffled_reverse_pipeline_reverses_the_seeded_benchmark_corpus(nq):
    pipeline = load_pipeline(ROOT / "pipelines" / "cic_benchmark_shuffled_reverse.yaml")
    task, gold = nq["task"], nq["gold"]
    pool = random.Random(0).sample(nq["documents"], 100)
    inputs = {
        "corpus_builder": {
            "query": task.input,
            "answers": task.answers,
            "gold_documents": gold,
            "bm25": nq["bm25"],
            "random_documents": pool,
        },
        "prompt_builder": {"query": task.input},
    }
    first = pipeline.run(inputs, include_outputs_from={"corpus_builder", "reorderer"})
    built = first["corpus_builder"]["documents"]
    assert first["corpus_builder"]["report"]["used"] <= 1500
    assert [d.id for d in first["reorderer"]["documents"]] == [d.id for d in built[::-1]]
    again = pipeline.run(inputs, include_outputs_from={"corpus_builder"})
    assert [d.id for d in again["corpus_builder"]["documents"]] == [d.id for d in built]


@pytest.mark.slow
def test_lost_in_the_middle_rag_pipeline_answers_from_the_sample_index(nq):
    """Runs IndexRetriever (sample index), the builder, the reorderer, the prompt and real SmolLM2."""
    pipeline = load_pipeline(ROOT / "pipelines" / "cic_rag_lost_in_the_middle.yaml")
    query = nq["task"].input
    result = pipeline.run(
        {
            "bm25_retriever": {"query": query},
            "dense_retriever": {"query": query},
            "corpus_builder": {"query": query},
            "prompt_builder": {"query": query},
        },
        include_outputs_from={"corpus_builder", "reorderer"},
    )
    report = result["corpus_builder"]["report"]
    assert (
        report["mode"] == "production" and report["used"] <= 1200 and set(report["per_retriever"]) <= {"bm25", "dense"}
    )
    built = result["corpus_builder"]["documents"]
    ordered = result["reorderer"]["documents"]
    assert ordered[0].id == built[0].id and ordered[-1].id == built[1].id
    reply = result["reader"]["replies"][0]
    assert reply.text.strip() and reply.meta["prompt_tokens"] > 1000
