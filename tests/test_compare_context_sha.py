"""``icr2 compare`` never reuses a cached answer that was given other passages than the run builds now: each
record of given passages stores ``context_sha``; a differing one is re-answered (or left out by --report-only)
and counted as ``stale_context``; records from before ``context_sha`` are reused and counted as
``context_unchecked``."""

import functools
import gzip
import json

import pytest
from haystack import Document

from icr2_components.cli import main
from icr2_components.evaluation.compare.cache import (
    NO_CONTEXT,
    cache_lines,
    context_sha,
    read_answer_records,
    resolve_cache_path,
    reuse_decision,
    seal,
)
from icr2_components.evaluation.compare.run import expected_context_sha, run_compare
from icr2_components.kilt.context_types import ContextSet, build_context_set
from icr2_components.kilt.questions import CompareQuestion
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.readers.local_chat_reader import LocalChatReader

PARIS = Document(id="p1", content="Paris is the capital of France.")
LYON = Document(id="p2", content="Lyon is a city in France.")


@pytest.mark.unit
def test_context_sha_follows_ids_contents_and_order():
    base = context_sha([PARIS, LYON])
    assert base == context_sha([Document(id="p1", content=PARIS.content), Document(id="p2", content=LYON.content)])
    assert context_sha([LYON, PARIS]) != base
    assert context_sha([Document(id="p1", content="Paris is the capital of Spain."), LYON]) != base
    assert context_sha([Document(id="p9", content=PARIS.content), LYON]) != base
    assert context_sha(None) == NO_CONTEXT and context_sha([]) != NO_CONTEXT
    assert len(base) == 16


@pytest.mark.unit
def test_reuse_decision_on_hand_built_records():
    now = context_sha([PARIS])
    assert reuse_decision({"answer": "Paris", "context_sha": now}, now) == "reuse"
    assert reuse_decision({"answer": "Madrid", "context_sha": context_sha([LYON])}, now) == "stale_context"
    assert reuse_decision({"answer": "Paris"}, now) == "context_unchecked"  # written before context_sha existed
    assert reuse_decision({"answer": "Paris", "context_sha": now}, NO_CONTEXT) == "stale_context"  # not built now
    assert reuse_decision({"answer": "Paris"}, None) == "reuse"  # open retrieval: the pipeline hash covers it
    # the answer budget asked: another run's is stale whatever the context; records from before the field are reused
    assert reuse_decision({"answer": "Par", "max_new_tokens": 2}, None, 16) == "stale_budget"
    assert reuse_decision({"answer": "Paris", "max_new_tokens": None}, now, 16) == "stale_budget"
    assert reuse_decision({"answer": "Paris", "max_new_tokens": 16, "context_sha": now}, now, 16) == "reuse"
    assert reuse_decision({"answer": "Paris", "context_sha": now}, now, 16) == "reuse"


@pytest.mark.unit
def test_expected_context_sha_per_pipeline_and_context_type():
    closed, oracle = (
        PipelineSpec.from_file("pipelines/closed_book.yaml"),
        PipelineSpec.from_file("pipelines/oracle.yaml"),
    )
    question = CompareQuestion(id="q1", query="What is the capital of France?", answers=["Paris"],
                               gold_documents=[PARIS], irrelevant_candidates=[LYON])
    contexts = build_context_set("q1", ["Paris"], [PARIS], [LYON], ["Madrid", "Berlin"])
    assert expected_context_sha(closed, question, contexts, "gold") == context_sha([PARIS])
    assert expected_context_sha(closed, question, contexts, "irrelevant") == context_sha([LYON])
    conflicting = expected_context_sha(oracle, question, contexts, "conflicting")
    assert conflicting == context_sha(contexts.conflicting) and conflicting != context_sha([PARIS])
    assert expected_context_sha(closed, question, contexts, "open") is None  # reads no passages
    assert expected_context_sha(oracle, question, contexts, "open") == context_sha([PARIS])  # given the gold ones
    assert expected_context_sha(closed, question, ContextSet(reasons={"gold": "no gold passage"}), "gold") == NO_CONTEXT


def _rewrite(path, change):
    """Each record changed and sealed again, as a writer that built it so would have (edits are refused)."""
    path = resolve_cache_path(path)  # answers.jsonl.gz, written as the run writes it
    records = [json.loads(line) for line in cache_lines(path)]
    text = "".join(json.dumps(seal(change(r)), ensure_ascii=False) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)


def test_a_changed_gold_context_is_reanswered_and_report_only_leaves_it_out(tmp_path, smollm2, monkeypatch, capsys):
    """Closed-book (real SmolLM2, 2 new tokens) on 2 questions under `gold`; then one record is made to carry
    another context's sha (as after the context was rebuilt differently) and one loses its sha (an old cache)."""
    calls = {"n": 0}
    original = LocalChatReader.run

    @functools.wraps(original)  # Haystack reads the sockets from run's signature
    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LocalChatReader, "run", counting)
    out = tmp_path / "run"
    settings = dict(limit=2, context_types="gold", out_dir=out, max_new_tokens=2, progress=False)
    first = run_compare(["pipelines/closed_book.yaml"], **settings)
    assert first["run"]["counters"]["model_runs"] == 2 and calls["n"] == 2
    cache = out / "answers.jsonl"
    records = read_answer_records(cache)
    assert len(records) == 2 and all(len(r["context_sha"]) == 16 for r in records)
    stale_id, old_id = records[0]["question_id"], records[1]["question_id"]
    right_sha = records[0]["context_sha"]

    def tamper(record):
        if record["question_id"] == stale_id:
            record["context_sha"] = context_sha([LYON])
        elif record["question_id"] == old_id:
            record.pop("context_sha", None)
        return record

    _rewrite(cache, tamper)
    calls["n"] = 0
    second = run_compare(["pipelines/closed_book.yaml"], **settings)
    counters = second["run"]["counters"]
    assert (counters["stale_context"], counters["context_unchecked"], counters["cached"], counters["model_runs"]) == (
        1,
        1,
        1,
        1,
    )
    assert calls["n"] == 1  # only the stale one re-answered
    now = {r["question_id"]: r for r in read_answer_records(cache)}
    assert now[stale_id]["context_sha"] == right_sha and "context_sha" not in now[old_id]
    assert second["summary"]["closed_book"]["gold"]["n"] == 2
    assert json.loads((out / "report.json").read_text())["run"]["counters"]["stale_context"] == 1

    _rewrite(cache, tamper)
    calls["n"] = 0
    assert main(["compare", "--pipelines", "pipelines/closed_book.yaml", "--limit", "2", "--context-types", "gold",
                 "--out", str(out), "--max-new-tokens", "2", "--no-progress", "--report-only"]) == 0
    assert calls["n"] == 0
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["counters"]["stale_context"] == 1 and report["run"]["counters"]["context_unchecked"] == 1
    assert report["run"]["report_only"] == {"complete_questions": 1, "incomplete_questions": 1}
    assert report["summary"]["closed_book"]["gold"]["n"] == 1  # the stale answer is not reported
    printed = capsys.readouterr().out
    assert "1 cached answer(s) were given other passages than this run builds (stale_context): left out" in printed
    assert "1 cached answer(s) predate context hashes (context_unchecked)" in printed


def test_answers_cached_under_another_max_new_tokens_are_reanswered_not_reused(tmp_path, smollm2, capsys):
    """Closed-book (real SmolLM2) on 2 questions at 2 new tokens, then the same command at 12: both answers are
    redone (counted as stale_budget) and come back longer; the same 12 again reuses them."""
    out = tmp_path / "run"
    command = ["compare", "--pipelines", "pipelines/closed_book.yaml", "--limit", "2", "--context-types", "gold",
               "--out", str(out), "--no-progress", "--max-new-tokens"]
    assert main([*command, "2"]) == 0
    short = {r["question_id"]: r for r in read_answer_records(out / "answers.jsonl")}
    assert len(short) == 2 and all(r["max_new_tokens"] == 2 for r in short.values())
    assert main([*command, "12"]) == 0
    counters = json.loads((out / "report.json").read_text())["run"]["counters"]
    assert (counters["stale_budget"], counters["model_runs"], counters["cached"]) == (2, 2, 0)
    longer = {r["question_id"]: r for r in read_answer_records(out / "answers.jsonl")}
    assert all(r["max_new_tokens"] == 12 for r in longer.values())
    assert all(len(longer[q]["answer"]) > len(short[q]["answer"]) for q in short)
    assert "2 cached answer(s) were answered under another --max-new-tokens (stale_budget): re-answered" in (
        capsys.readouterr().out)
    assert main([*command, "12"]) == 0
    counters = json.loads((out / "report.json").read_text())["run"]["counters"]
    assert (counters["stale_budget"], counters["model_runs"], counters["cached"]) == (0, 0, 2)
