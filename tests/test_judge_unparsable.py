"""A judge reply that holds no score is counted as unparsable, per metric, and never scored; a judge that fails
every request stops the run with its error, the failures recorded as failed (asked again next run), not scored.

The judge (and, to keep it quick, the reader) is a real HTTP server that answers every request with one chat
completion (``icr2_components.testing.FixedAnswerServer``), named in a backend file written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from icr2_components.backends import load_backend
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.evaluation.judging.judgements import JUDGEMENTS_FILE, NO_PASSAGES
from icr2_components.evaluation.judging.ragas_judge import JUDGE_METRICS, JudgeRequestError
from icr2_components.testing import FixedAnswerServer

REPLY = "I would rather not say."  # no rating digit, no JSON: nothing ragas can read
COMPLETION = json.dumps({
    "id": "fixed", "object": "chat.completion", "created": 0, "model": "fixed",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16},
}).encode()
PIPELINES = ["pipelines/closed_book.yaml", "pipelines/oracle.yaml"]
SETTINGS = {"limit": 2, "max_new_tokens": 8, "context_types": "open", "progress": False}


def backend_file(folder: Path, url: str, name: str) -> Path:
    file = folder / f"{name}.yaml"
    file.write_text(yaml.safe_dump({"kind": "served", "max_concurrency": 2, "served_model": {
        "api_base_url": url, "model": "fixed", "context_length": 8192, "max_retries": 0, "timeout_s": 10,
        "tokenizer": "smollm2-135m-instruct"}}))
    return file


def test_unparsable_judge_replies_are_counted_per_metric_and_never_scored(tmp_path):
    with FixedAnswerServer(200, COMPLETION, "application/json") as server:
        fixed = backend_file(tmp_path, server.url, "fixed")
        report = run_compare(PIPELINES, out_dir=tmp_path / "run", backend=load_backend(fixed), judge=str(fixed),
                             **SETTINGS)
    section = report["judge"]
    # closed-book shows no passages: judged on answer relevance only, the others counted as not judged
    assert section["not_judged"] == {"groundedness": {NO_PASSAGES: 2}, "context_relevance": {NO_PASSAGES: 2}}
    assert section["unparsable"] == {"groundedness": 2, "answer_relevance": 4, "context_relevance": 2}
    assert section["counters"]["unparsable"] == 8 and section["counters"]["failed_requests"] == 0
    for name in ("closed_book", "oracle"):
        for metric in JUDGE_METRICS:
            cell = section["summary"][name]["open"][metric]
            assert cell["n"] == 0 and cell["mean"] is None  # no default 0: nothing scored
    assert section["summary"]["oracle"]["open"]["groundedness"]["unparsable"] == 2
    assert not section["paired"]["comparisons"]
    lines = [json.loads(line) for line in cache_lines(tmp_path / "run" / JUDGEMENTS_FILE)]
    assert len(lines) == 8 and all(line["value"] is None and line["unparsable"] for line in lines)
    assert all(line["replies"] and set(line["replies"]) == {REPLY} for line in lines)
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert '"answer_relevance": 4' in markdown and "| oracle | open | - | - | - | 0 (2) | 0 (2) | 0 (2) |" in markdown
    # --report-only asks no one (the server is gone) and reports the judgements cached
    again = run_compare(PIPELINES, out_dir=tmp_path / "run", backend=load_backend(fixed), judge=str(fixed),
                        report_only=True, **SETTINGS)
    assert again["judge"]["summary"] == section["summary"] and again["judge"]["unparsable"] == section["unparsable"]


def test_a_judge_failing_every_request_stops_the_run_and_records_failures_not_scores(tmp_path):
    with FixedAnswerServer(200, COMPLETION, "application/json") as reader_server, \
            FixedAnswerServer(503, b'{"error": {"message": "overloaded"}}', "application/json") as judge_server:
        reader = load_backend(backend_file(tmp_path, reader_server.url, "reader"))
        judge = backend_file(tmp_path, judge_server.url, "judge")
        with pytest.raises(JudgeRequestError, match="judge request failed"):
            run_compare(PIPELINES, out_dir=tmp_path / "run", backend=reader, judge=str(judge), **SETTINGS)
    lines = [json.loads(line) for line in cache_lines(tmp_path / "run" / JUDGEMENTS_FILE)]
    assert lines and all(line["failed_request"] and line["value"] is None and "503" in line["error"]
                         for line in lines)
