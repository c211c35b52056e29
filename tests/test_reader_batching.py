"""Batched answering with the real SmolLM2: `LocalChatReader.run_batch` (one left-padded generate call) gives the
greedy replies `run` gives one at a time, and `icr2 compare --batch-size` caches and reports exactly what a run
with batch size 1 does; white-box decoding readers say why they answer one prompt at a time."""

from pathlib import Path

import pytest
from haystack.dataclasses import ChatMessage

from icr2_components.evaluation.compare.cache import read_answer_records
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.readers.local_chat_reader import LocalChatReader
from icr2_components.text.templates import render_cic_prompt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prompts(sample_files):
    """Real prompts of very different lengths: closed-book questions and ICR2 corpus-in-context prompts over 1 to
    6 real sample passages."""
    passages = []
    for document in KiltKnowledgeSource(sample_files.corpus).documents():
        passages.append(document)
        if len(passages) == 10:
            break
    conversations = [
        [ChatMessage.from_user("who got the first nobel prize in physics?")],
        [
            ChatMessage.from_user(
                render_cic_prompt("qa", "what is the subject of the first passage?", passages[:1]).text
            )
        ],
        [
            ChatMessage.from_system("Answer in one short phrase."),
            ChatMessage.from_user("what is the capital of France?"),
        ],
        [ChatMessage.from_user(render_cic_prompt("qa", "which titles appear in the passages?", passages[1:7]).text)],
        [ChatMessage.from_user(render_cic_prompt("qa", "summarise the passages", passages[7:10]).text)],
    ]
    return conversations


def test_batched_greedy_replies_equal_one_at_a_time(prompts, smollm2):
    """fp32; in bf16 the rounding depends on the batch's shape and a near tie can flip (measured by
    bench/reader_batching.py: here 1 of these 5 replies differed)."""
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=24, dtype="float32", device="cpu")
    reader.warm_up()
    alone = [reader.run(messages=messages)["replies"][0] for messages in prompts]
    together = reader.run_batch(prompts)
    lengths = [reply.meta["prompt_tokens"] for reply in alone]
    assert max(lengths) - min(lengths) > 500  # the short prompts really are padded by hundreds of tokens
    assert [r.text for r in together] == [r.text for r in alone]
    for key in ("prompt_tokens", "completion_tokens", "finish_reason"):
        assert [r.meta[key] for r in together] == [r.meta[key] for r in alone], key
    assert {r.meta["batch_size"] for r in together} == {len(prompts)}
    assert all(r.text for r in together)
    assert reader.batch_caveat() is None


def test_a_half_precision_reader_says_its_batched_replies_may_differ(smollm2):
    """bench/reader_batching.py measured 6 to 10 of 32 bfloat16 replies different from batch size 1: the reader
    says so, and compare warns before batching it."""
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=8, dtype="bfloat16", device="cpu")
    caveat = reader.batch_caveat()
    assert caveat is not None and "bfloat16" in caveat and "float32" in caveat


def test_compare_warns_before_batching_a_half_precision_reader(tmp_path, smollm2, caplog):
    """The closed-book pipeline in float32 batches silently; in bfloat16 compare's batching logs why its replies
    may differ from one at a time (nothing is generated here: the jobs are only planned)."""
    import logging
    from types import SimpleNamespace

    from icr2_components.concurrency import Job
    from icr2_components.evaluation.compare.batching import batched_jobs

    text = (ROOT / "pipelines" / "closed_book.yaml").read_text()
    assert "dtype: float32" in text
    for dtype in ("float32", "bfloat16"):
        path = tmp_path / f"closed_book_{dtype}.yaml"
        path.write_text(text.replace("dtype: float32", f"dtype: {dtype}"))
        spec = PipelineSpec.from_file(str(path))
        steps = [SimpleNamespace(spec=spec, controlled=False, question=SimpleNamespace(query=f"question {i}"),
                                 documents=None) for i in range(2)]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="icr2_components.evaluation.compare.batching"):
            jobs = list(batched_jobs((Job(step, lambda: None) for step in steps), batch_size=2, max_new_tokens=8))
        assert len(jobs) == 2
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if dtype == "float32":
            assert warned == [] and spec.batch_caveat(controlled=False) is None
        else:
            assert len(warned) == 1 and "bfloat16" in warned[0] and "2 questions at a time" in warned[0], warned


@pytest.mark.unit
def test_white_box_decoding_readers_say_why_they_do_not_batch():
    for path in ("pipelines/cmt_cad.yaml", "pipelines/cmt_ph3_context.yaml"):
        reason = PipelineSpec.from_file(str(ROOT / path)).unbatched_because(controlled=True)
        assert reason is not None and "one prompt at a time" in reason, path
    for path in ("pipelines/closed_book.yaml", "pipelines/corpus_in_context.yaml", "pipelines/rap.yaml"):
        assert PipelineSpec.from_file(str(ROOT / path)).unbatched_because(controlled=False) is None, path


def without_timings(value):
    """A record or report with every timing left out (they differ between any two runs), and a cache line's seal
    (``record_sha``/``replaces``: it hashes the whole line, timings included)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items()
                if "latency" not in k and k not in ("generation_seconds", "record_sha", "replaces")}
    if isinstance(value, list):  # the paired comparisons of latency_s too
        return [without_timings(v) for v in value if not (isinstance(v, dict) and v.get("metric") == "latency_s")]
    return value


def test_compare_in_batches_caches_and_reports_what_one_at_a_time_does(tmp_path, smollm2, monkeypatch):
    """3 real questions, closed-book and oracle, batch size 2 against 1: each group is a full batch of 2 and a
    last one of 1 answered at the end, the closed-book gold answers reuse open answers still queued, and the
    cache (records and their order on disk) and the report's numbers are those of batch size 1."""
    from icr2_components.models.local_chat_model import LocalChatModel

    batches = []
    original = LocalChatModel.reply_batch

    def counted(self, conversations, *args, **kwargs):  # the real batch, its size noted
        batches.append(len(conversations))
        return original(self, conversations, *args, **kwargs)

    monkeypatch.setattr(LocalChatModel, "reply_batch", counted)
    pipelines = [str(ROOT / p) for p in ("pipelines/closed_book.yaml", "pipelines/oracle.yaml")]
    runs = {}
    for batch_size in (1, 2):
        out = tmp_path / f"batch{batch_size}"
        report = run_compare(
            pipelines,
            context_types="open,gold",
            limit=3,
            out_dir=out,
            max_new_tokens=8,
            progress=False,
            batch_size=batch_size,
        )
        runs[batch_size] = (report, read_answer_records(out / "answers.jsonl"))
    (one, one_records), (two, two_records) = runs[1], runs[2]
    # closed-book: 3 open answers (2 + 1), reused for gold; the oracle: 3 open (gold passages given) and 3 gold,
    # each 2 + 1; batch size 1 never calls reply_batch
    assert sorted(batches) == [1, 1, 1, 2, 2, 2]
    assert len(one_records) == 3 * 2 * 2
    assert all(r["answer"] for r in one_records)  # real answers, not errors
    assert without_timings(two_records) == without_timings(one_records)  # the same answers, in the same order on disk
    assert sum(bool(r.get("reused_from")) for r in two_records) == 3
    assert one["run"]["counters"] == two["run"]["counters"]
    assert (one["run"]["batch_size"], two["run"]["batch_size"]) == (1, 2)
    for report in (one, two):
        report.pop("run"), report.pop("files")  # the run's own record (batch size, folder) and where it wrote
    assert without_timings(two) == without_timings(one)


def test_a_batch_with_an_over_long_prompt_is_answered_again_one_question_at_a_time(tmp_path, smollm2):
    """A real over-long question (9,000 words through the real SmolLM2 reader) in a batch of 2: the batch fails
    with ContextTooLongError, so each question is answered alone: that one records its own error, the other its
    answer, and the cache is that of batch size 1."""
    import json

    dataset = tmp_path / "long.jsonl"
    long_question = " ".join(f"word{i}" for i in range(9000))  # far over 8,192 tokens
    rows = (
        {"id": "long-1", "input": long_question, "output": [{"answer": "nothing"}]},
        {"id": "short-1", "input": "what is the capital of france", "output": [{"answer": "Paris"}]},
    )
    dataset.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records = {}
    for batch_size in (1, 2):
        out = tmp_path / f"batch{batch_size}"
        report = run_compare([str(ROOT / "pipelines/closed_book.yaml")], dataset=str(dataset), context_types="open",
                             out_dir=out, max_new_tokens=4, progress=False, batch_size=batch_size)
        assert report["run"]["counters"]["errors"] == 1 and report["run"]["counters"]["model_runs"] == 1
        records[batch_size] = read_answer_records(out / "answers.jsonl")
    saved = {r["question_id"]: r for r in records[2]}
    assert "smollm2-135m-instruct accepts" in saved["long-1"]["error"] and saved["short-1"]["answer"]
    assert without_timings(records[2]) == without_timings(records[1])
