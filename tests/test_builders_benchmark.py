"""ICR2 benchmark construction on the bundled NQ sample: records, Table 7 statistics, the reader, the CLI."""

from __future__ import annotations

import json

import pytest

from icr2_components.builders.benchmark import benchmark_statistics, build_icr2_benchmark
from icr2_components.kilt import KiltKnowledgeSource, KiltTask
from icr2_components.kilt.icr2_benchmark import GoldPassageLookup, infer_task_type, read_icr2_benchmark
from icr2_components.kilt.tasks import Provenance, read_kilt_tasks
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.records import SkipReport
from icr2_components.text.normalization import contains_answer


@pytest.fixture(scope="module")
def sample_world(sample_files):
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    documents = list(KiltKnowledgeSource(sample_files.corpus).documents())
    retrieve = {}
    for name, algorithm in (("okapi", "BM25Okapi"), ("plus", "BM25Plus")):
        store = InMemoryDocumentStore(bm25_algorithm=algorithm)
        store.write_documents(documents)
        retriever = InMemoryBM25Retriever(store)
        retrieve[name] = lambda query, k, r=retriever: r.run(query=query, top_k=k)["documents"]
    tasks = list(read_kilt_tasks(sample_files.tasks, limit=6))
    # one task whose provenance names an article the corpus does not have: counted, not written
    tasks.append(
        KiltTask(id="missing", input="who is nobody", answers=["nobody"], provenance=[Provenance(wikipedia_id="1")])
    )
    return {"documents": documents, "retrieve": retrieve, "tasks": tasks, "lookup": GoldPassageLookup(documents)}


def test_build_write_read_and_table_7(sample_world, tmp_path):
    out = tmp_path / "icr2-nq.jsonl"
    summary = build_icr2_benchmark(
        sample_world["tasks"], sample_world["retrieve"], sample_world["documents"], sample_world["lookup"], out,
        budget_tokens=1500, confounding_ratio=0.5, seed=1, top_k=50, progress=False,
    )
    assert summary.written == 6
    assert summary.skips["counts"] == {"no gold passage in the corpus": 1}
    skips = SkipReport()
    instances = list(read_icr2_benchmark(out, skips=skips))
    assert len(instances) == 6 and skips.total == 0
    tokenizer = MODEL_CACHE.tokenizer("smollm2-135m-instruct")
    # the task skipped for having no gold passage in the corpus is the last one: the others pair up in order
    for instance, task in zip(instances, sample_world["tasks"][: len(instances)], strict=True):
        record = instance.record
        assert set(record) >= {
            "id",
            "query",
            "answers",
            "task_type",
            "context",
            "gold_passage_ids",
            "budget",
            "confounding_ratio",
        }
        assert instance.id == task.id and instance.query == task.input and instance.task_type == "qa"
        assert record["budget"] == {"unit": "tokens", "value": 1500} and record["confounding_ratio"] == 0.5
        ids = [item["passage_id"] for item in instance.context]
        assert ids == [f"PSG{i:03d}" for i in range(1, len(ids) + 1)]
        gold_docs = sample_world["lookup"](task)
        assert sorted(record["gold_doc_ids"]) == sorted(d.id for d in gold_docs)
        assert {d.meta["passage_id"] for d in instance.gold_documents()} == set(instance.gold_passage_ids)
        origins = {item["origin"] for item in instance.context}
        assert origins <= {"gold", "okapi", "plus", "random"}
        for item in instance.context:
            if item["origin"] != "gold":
                assert not contains_answer(item["text"], task.answers)
        confounders = [item for item in instance.context if item["origin"] != "gold"]
        assert sum(item["origin"] != "random" for item in confounders) == int(0.5 * len(confounders) + 0.5 + 1e-9)
        # prompt_tokens is the reader's count of the whole chat-templated CiC prompt
        from icr2_components.text.templates import render_cic_prompt

        text = render_cic_prompt("qa", instance.query, instance.documents(), tokenizer=tokenizer).text
        assert record["prompt_tokens"] == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    stats = benchmark_statistics(instance.record for instance in instances)
    assert stats == summary.statistics
    assert stats["queries"] == 6
    assert stats["ctx"] == sum(len(i.context) for i in instances) / 6
    assert stats["prov"] == sum(len(i.gold_passage_ids) for i in instances) / 6
    assert 1000 < stats["tokens"] < 1700


def test_same_seed_same_file_other_seed_other_file(sample_world, tmp_path):
    kwargs = dict(budget_passages=12, confounding_ratio=0.5, top_k=40, progress=False)
    tasks = sample_world["tasks"][:3]
    paths = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        path = tmp_path / f"{name}.jsonl"
        build_icr2_benchmark(
            tasks,
            sample_world["retrieve"],
            sample_world["documents"],
            sample_world["lookup"],
            path,
            seed=seed,
            **kwargs,
        )
        paths.append(path.read_text())
    assert paths[0] == paths[1] and paths[0] != paths[2]


@pytest.mark.unit
def test_reader_counts_bad_records(tmp_path, sample_world):
    good = tmp_path / "good.jsonl"
    build_icr2_benchmark(sample_world["tasks"][:1], sample_world["retrieve"], None, sample_world["lookup"], good,
                         budget_passages=5, top_k=20, tokenizer=None, progress=False)
    record = json.loads(good.read_text())
    broken = dict(record, gold_passage_ids=["PSG999"])
    no_context = {k: v for k, v in record.items() if k != "context"}
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([json.dumps(record), "{not json", json.dumps(broken), json.dumps(no_context)]) + "\n")
    skips = SkipReport()
    assert [i.id for i in read_icr2_benchmark(path, skips=skips)] == [record["id"]]
    assert skips.counts == {"malformed JSON": 1, "gold passage id not in the context": 1, "missing fields": 1}


def test_bad_arguments(sample_world, tmp_path):
    args = (sample_world["tasks"][:1], sample_world["retrieve"], None, sample_world["lookup"], tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="random pool"):
        build_icr2_benchmark(*args, budget_passages=5, confounding_ratio=0.5, progress=False)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        build_icr2_benchmark(*args, budget_passages=5, confounding_ratio=2, progress=False)
    with pytest.raises(ValueError, match="task_type"):
        build_icr2_benchmark(*args, budget_passages=5, task_type="chat", progress=False)
    # a budget smaller than the gold passages: the instance is counted as skipped, the build goes on
    summary = build_icr2_benchmark(*args, budget_tokens=20, progress=False)
    assert summary.written == 0 and summary.skips["counts"] == {"gold passages exceed the budget": 1}
    assert infer_task_type("fever-dev-kilt.jsonl") == "fact_verification"
    assert infer_task_type("wow-dev-kilt.jsonl") == "dialogue"
    assert infer_task_type("nq-sample-kilt.jsonl") == "qa"


@pytest.mark.slow
def test_cli_builds_from_the_sample_index(tmp_path, capsys):
    """`icr2 build-benchmark` on the bundled NQ sample through open_index (BM25 only, to stay quick)."""
    from icr2_components.cli import main

    out = tmp_path / "cli.jsonl"
    code = main(["build-benchmark", "--index", "indexing/kilt-sample.yaml", "--retrievers", "bm25", "--limit", "3",
                 "--budget-passages", "8", "--ratio", "0.5", "--seed", "2", "--out", str(out), "--no-progress",
                 "--summary", str(tmp_path / "summary.json")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "#CTX" in printed and "#Prov" in printed
    instances = list(read_icr2_benchmark(out))
    assert len(instances) == 3 and all(len(i.context) == 8 for i in instances)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["statistics"]["ctx"] == 8.0
    assert main(["build-benchmark", "--retrievers", "bm25,sparse", "--out", str(out)]) == 1
