"""The pipeline library on Elasticsearch, unedited: vanilla RAG, corpus-in-context and adaptive RAG end to end with
the real SmolLM2, their retrievers switched (ICR2_INDEX_CONFIG) to indexing/kilt-sample-elasticsearch.yaml on the
real node; the passages are shown to come from that index (its search counter moves, every id is in it).

The config is indexing/kilt-sample-elasticsearch.yaml as shipped, with the test node's URL and a throwaway index
name (``$ICR2_TEST_INDEX_PREFIX-pipelines-<random>``, deleted afterwards). The index holds the sample's passages
with the embeddings the embedded sample index already computed (same model, same passages): the test spends its
time on the pipelines, not on embedding the sample again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.kilt.tasks import read_kilt_tasks
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.stores.index_switch import INDEX_CONFIG_ENV

pytestmark = pytest.mark.elasticsearch

REPO_ROOT = Path(__file__).resolve().parents[1]
ES_CONFIG = REPO_ROOT / "indexing" / "kilt-sample-elasticsearch.yaml"
INDEX_PREFIX = os.environ.get("ICR2_TEST_INDEX_PREFIX", "icr2-test")
QUESTIONS = 2
MAX_NEW_TOKENS = 8


@pytest.fixture(scope="module")
def es_sample_config(es_sample_index):
    """A copy of kilt-sample-elasticsearch.yaml on the test node and an index loaded with the sample (shared)."""
    return es_sample_index


@pytest.fixture
def switched(es_sample_config, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv(INDEX_CONFIG_ENV, es_sample_config[0])
    return es_sample_config


def searches(es_client, index: str) -> int:
    es_client.indices.refresh(index=index)
    return int(es_client.indices.stats(index=index, metric="search")["_all"]["primaries"]["search"]["query_total"])


def assert_from_index(es_client, index: str, ids: list[str]) -> None:
    assert ids, "the pipeline returned no passages"
    found = es_client.mget(index=index, ids=ids, source=False)["docs"]
    assert all(doc["found"] for doc in found), ids


@pytest.fixture(scope="module")
def questions(sample_files):
    return [task.input for task in read_kilt_tasks(sample_files.tasks, limit=QUESTIONS)]


def retrievers_on(spec: PipelineSpec, config_path: str) -> list:
    pipeline = spec.pipeline(controlled=False)
    found = [component for _, component in pipeline.walk() if type(component).__name__ == "IndexRetriever"]
    assert found and {component.index for component in found} == {config_path}
    return found


@pytest.mark.parametrize("name", ["vanilla_rag", "corpus_in_context"])
def test_rag_pipelines_answer_from_elasticsearch(name, switched, es_client, questions, smollm2):
    config_path, index = switched
    spec = PipelineSpec.from_file(str(REPO_ROOT / "pipelines" / f"{name}.yaml"))
    for retriever in retrievers_on(spec, config_path):
        retriever.warm_up()
        assert retriever._handle.backend.name == "elasticsearch" and retriever._handle.backend.index_name == index
    for question in questions:
        before = searches(es_client, index)
        result = spec.run(question, None, controlled=False, max_new_tokens=MAX_NEW_TOKENS)
        assert searches(es_client, index) > before  # the retrieval went to Elasticsearch
        assert_from_index(es_client, index, result["shown_ids"])
        assert result["answer"].strip()


def test_adaptive_rag_answers_from_elasticsearch(switched, es_client, questions, smollm2):
    config_path, index = switched
    spec = PipelineSpec.from_file(str(REPO_ROOT / "pipelines" / "adaptive_rag.yaml"))
    retrievers_on(spec, config_path)
    pipeline = spec.pipeline(controlled=False)
    # as shipped (the learned gate decides), then with the gate's run-time method `always`, so the retrieval branch runs
    for method in (None, "always"):
        for question in questions:
            gate_input = {"query": question} if method is None else {"query": question, "method": method}
            before = searches(es_client, index)
            result = pipeline.run({"gate": gate_input}, include_outputs_from={"retriever", "gate"})
            assert result["answer"]["value"][0].text.strip()
            retrieved = result["gate"]["decision"]["retrieve"]
            if method == "always":
                assert retrieved
            if retrieved:
                assert searches(es_client, index) > before
                assert_from_index(es_client, index, [d.id for d in result["retriever"]["documents"]])
            else:
                assert "retriever" not in result and searches(es_client, index) == before


def test_compare_with_index_runs_the_library_on_elasticsearch_and_keeps_its_cache_apart(
    es_sample_config, es_client, tmp_path, monkeypatch, smollm2
):
    import json

    from icr2_components.cli import main
    from icr2_components.pipeline_spec import behaviour_hash

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv(INDEX_CONFIG_ENV, raising=False)
    config_path, index = es_sample_config
    before = searches(es_client, index)
    code = main(["compare", "--pipelines", "pipelines/vanilla_rag.yaml", "--index", config_path, "--limit", "1",
                 "--context-types", "open", "--max-new-tokens", str(MAX_NEW_TOKENS), "--out", str(tmp_path / "run"),
                 "--no-progress"])
    assert code == 0
    assert searches(es_client, index) > before                     # gold lookup's BM25 candidates and the retriever
    assert INDEX_CONFIG_ENV not in os.environ                       # the switch ends with the command
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    unswitched = behaviour_hash(yaml.safe_load((REPO_ROOT / "pipelines" / "vanilla_rag.yaml").read_text()))
    assert report["run"]["pipelines"]["vanilla_rag"]["hash"] != unswitched
    records = [
        json.loads(line) for line in cache_lines(tmp_path / "run" / "answers.jsonl.gz") if line.strip()
    ]
    shown = [i for r in records for i in (r.get("shown_ids") or [])]
    assert_from_index(es_client, index, shown)
