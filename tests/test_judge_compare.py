"""``icr2 compare --judge``: ragas' judge metrics through the real llama.cpp server, cached and resumable.

Two questions, two pipelines (vanilla RAG and the oracle, given the gold passage: CUB's gold context), answers of
8 tokens from the real server; the judge is the same server behind a counting proxy (``icr2_components.testing``),
so a second run can be seen to ask it nothing.
"""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from icr2_components.backends import load_backend
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.compare.run import CACHE_FILE, run_compare
from icr2_components.evaluation.judging.judgements import JUDGEMENTS_FILE
from icr2_components.evaluation.judging.ragas_judge import JUDGE_METRICS
from icr2_components.testing.forwarding_proxy import ForwardingProxy

pytestmark = pytest.mark.llama_server

REPO = Path(__file__).resolve().parents[1]
PIPELINES = ["pipelines/vanilla_rag.yaml", "pipelines/oracle.yaml"]
SETTINGS = {"limit": 2, "max_new_tokens": 8, "context_types": "gold", "progress": False}


class CountingProxy(ForwardingProxy):
    """Counts the chat-completion requests it forwards."""

    def __init__(self, target_root: str) -> None:
        super().__init__(target_root)
        self.chats = 0
        self.lock = getattr(self, "lock", threading.Lock())

    def exchange(self, method, path, body, forward):
        if self.is_chat(method, path):
            with self.lock:
                self.chats += 1
        return forward()


def backend_file(folder: Path, url: str, name: str) -> Path:
    text = (REPO / "backends" / "llama_cpp_server.yaml").read_text().replace("http://127.0.0.1:8089/v1", url)
    file = folder / f"{name}.yaml"
    file.write_text(text)
    return file


@pytest.fixture(scope="module")
def judged(llama_server_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("judge")
    proxy = CountingProxy(llama_server_url.rsplit("/v1", 1)[0])
    try:
        reader = load_backend(backend_file(folder, llama_server_url, "reader"))
        judge = backend_file(folder, proxy.url, "judge")
        report = run_compare(PIPELINES, out_dir=folder / "run", backend=reader, judge=str(judge), **SETTINGS)
        yield folder, proxy, judge, reader, report
    finally:
        proxy.close()


def test_every_judge_metric_is_in_the_report_with_its_n_interval_and_paired_test(judged):
    folder, proxy, _, _, report = judged
    section = report["judge"]
    assert proxy.chats > 0  # the judge was asked, through the real server
    assert list(section["metrics"]) == list(JUDGE_METRICS)
    for name in ("vanilla_rag", "oracle"):
        for metric in JUDGE_METRICS:
            cell = section["summary"][name]["gold"][metric]
            # every answer is either scored or counted as unparsable: none lost, none failed
            assert cell["n"] + cell["unparsable"] == 2 and cell["failed"] == 0, (name, metric, cell)
            if cell["n"]:
                assert 0.0 <= cell["mean"] <= 1.0 and cell["method"] != "none"
    lines = [json.loads(line) for line in cache_lines(folder / "run" / JUDGEMENTS_FILE)]
    assert len(lines) == 2 * 2 * len(JUDGE_METRICS)
    for line in lines:
        assert (line["value"] is None) == line["unparsable"]
        assert line["judge_hash"] == section["judge_hash"]
    # the same paired machinery as every compare metric, for each judge metric answered by both pipelines
    compared = {(c["metric"], c["pipeline"], c["baseline"]) for c in section["paired"]["comparisons"]}
    for metric in JUDGE_METRICS:
        both = all(section["summary"][n]["gold"][metric]["n"] for n in ("vanilla_rag", "oracle"))
        assert ((metric, "oracle", "vanilla_rag") in compared) == both
    for comparison in section["paired"]["comparisons"]:
        assert {"difference", "p_value", "p_holm", "verdict", "n"} <= set(comparison)
    markdown = (folder / "run" / "report.md").read_text()
    assert "## Judged without gold labels" in markdown
    for metric in JUDGE_METRICS:
        n = section["summary"]["oracle"]["gold"][metric]["n"]
        assert f"{metric} n (unparsable)" in markdown and f"| {n} (" in markdown
    assert "Judged without gold labels" in (folder / "run" / "report.html").read_text()


def test_a_second_run_asks_the_judge_nothing_and_reports_the_same(judged):
    folder, proxy, judge, reader, report = judged
    before = proxy.chats
    again = run_compare(PIPELINES, out_dir=folder / "run", backend=reader, judge=str(judge), **SETTINGS)
    assert proxy.chats == before
    assert again["judge"]["counters"]["judged"] == 0
    assert again["judge"]["counters"]["cached"] == 2 * 2 * len(JUDGE_METRICS)
    assert again["judge"]["summary"] == report["judge"]["summary"]


def test_a_judgement_cut_by_a_kill_is_asked_again_and_only_it(judged, tmp_path):
    folder, proxy, judge, reader, report = judged
    out = tmp_path / "run"
    out.mkdir()
    for name in (CACHE_FILE, JUDGEMENTS_FILE):
        (out / name).write_bytes((folder / "run" / name).read_bytes())
    lines = cache_lines(out / JUDGEMENTS_FILE)
    body, last = "".join(line + "\n" for line in lines[:-1]).encode(), (lines[-1] + "\n").encode()
    member = gzip.compress(last)  # the gzip cache grows by one member per judgement: killed while writing the last
    (out / JUDGEMENTS_FILE).write_bytes(gzip.compress(body) + member[: len(member) // 2])
    cut = json.loads(last)
    before = proxy.chats
    again = run_compare(PIPELINES, out_dir=out, backend=reader, judge=str(judge), **SETTINGS)
    assert again["judge"]["counters"]["judged"] == 1 and again["run"]["counters"]["model_runs"] == 0
    assert proxy.chats - before == len(cut["replies"])  # the one judgement's requests, nothing else
    redone = json.loads(cache_lines(out / JUDGEMENTS_FILE)[-1])
    assert redone["key"] == cut["key"] and redone["value"] == cut["value"]  # a greedy judge says it again
    assert again["judge"]["summary"] == report["judge"]["summary"]
