"""compare's ``corpus`` context type gives an ICR2 record's whole corpus in context (gold among confounders, in the
record's order) to a pipeline's context entry, with the real SmolLM2 answering over real sample passages; a KILT
task file has no corpus, and says so instead of answering without one."""

from pathlib import Path

import pytest

from icr2_components.evaluation.compare.cache import context_sha, read_answer_records
from icr2_components.evaluation.compare.run import parse_context_types, run_compare
from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark

ROOT = Path(__file__).resolve().parents[1]
READER_OVER_GIVEN_PASSAGES = str(ROOT / "bench" / "icr2_table3" / "pipelines" / "untrained.yaml")


@pytest.fixture(scope="module")
def icr2_file(tmp_path_factory):
    from icr2_components.training.sample_data import build_sample_benchmark

    path = tmp_path_factory.mktemp("corpus-context") / "bench.jsonl"
    build_sample_benchmark(path, limit=2, budget_passages=3, retrievers=["bm25", "dense"])
    return path


def test_corpus_context_is_the_records_corpus_in_order(icr2_file, tmp_path):
    run_compare([READER_OVER_GIVEN_PASSAGES], dataset=str(icr2_file), context_types="corpus", out_dir=tmp_path,
                max_new_tokens=4, progress=False)
    records = {r["question_id"]: r for r in read_answer_records(tmp_path / "answers.jsonl")}
    instances = list(read_icr2_benchmark(icr2_file))
    assert set(records) == {i.id for i in instances}
    for instance in instances:
        documents = instance.documents()
        record = records[instance.id]
        assert record["context_type"] == "corpus"
        assert record["shown_ids"] == [d.id for d in documents]  # all of them, gold included, in the record's order
        assert record["context_sha"] == context_sha(documents)
        assert set(record["gold_ids"]) <= set(record["shown_ids"]) and len(documents) == 3
        assert record["prompt_tokens"] > 300  # three ~100-word passages in the prompt, not an empty context


def test_corpus_context_on_a_kilt_file_is_reported_missing(tmp_path):
    assert parse_context_types("corpus,gold") == ["corpus", "gold"]
    with pytest.raises(ValueError, match="corpus"):
        parse_context_types("corpora")
    report = run_compare([READER_OVER_GIVEN_PASSAGES], context_types="corpus", out_dir=tmp_path, limit=1,
                         max_new_tokens=4, progress=False)
    assert "no corpus in context" in str(report["run"])


@pytest.fixture(scope="module")
def held_icr2_file(tmp_path_factory):
    """2 of the registered Table 3 evaluation questions: the committed head never trained on them (compare refuses
    an artifact's training questions)."""
    from icr2_components.training.sample_data import build_sample_benchmark

    ids = [line.strip() for line in (ROOT / "bench" / "data" / "icr2_table3" / "eval_ids.txt").read_text()
           .splitlines() if line.strip() and not line.startswith("#")][:2]
    path = tmp_path_factory.mktemp("corpus-context-held") / "bench.jsonl"
    build_sample_benchmark(path, limit=2, budget_passages=3, retrievers=["bm25", "dense"], question_ids=ids)
    return path


def test_a_pipeline_that_keeps_some_of_the_corpus_records_what_it_kept(held_icr2_file, tmp_path):
    """The registered RetHead arm's pipeline (its committed head keeps 2 of the corpus, in their order): the record
    shows the 2 passages the reader read, not the 3 it was given, and its prompt is shorter than the reader's over
    all 3 (a selector's records once listed every given passage, so its gold recall could not be told)."""
    selecting = str(ROOT / "bench" / "icr2_table3" / "pipelines" / "rethead.yaml")
    run_compare([READER_OVER_GIVEN_PASSAGES, selecting], dataset=str(held_icr2_file), context_types="corpus",
                out_dir=tmp_path, max_new_tokens=4, progress=False)
    records = read_answer_records(tmp_path / "answers.jsonl")
    everything = {r["question_id"]: r for r in records if r["pipeline"] == "untrained"}
    kept = {r["question_id"]: r for r in records if r["pipeline"] == "rethead"}
    assert set(kept) == set(everything) and len(kept) == 2
    for question, record in kept.items():
        given = everything[question]["shown_ids"]
        assert len(given) == 3 and len(record["shown_ids"]) == 2
        assert [i for i in given if i in record["shown_ids"]] == record["shown_ids"]  # a subset, in the given order
        assert record["prompt_tokens"] < everything[question]["prompt_tokens"]
