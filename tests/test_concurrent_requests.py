"""Concurrent requests give a sequential run's results, on real answers from the project's llama.cpp server.

``icr2 compare``, ``icr2 label-retrieval-need`` and ``icr2 eval-gate --labels`` send up to N requests at once to a
served backend (``icr2_components.concurrency``); ``icr2 serve`` over a served backend runs its ``max_concurrency``
pipelines at once under many concurrent ``openai`` clients. Here each runs once one request at a time and once with
four at once, against the server ``scripts/llama_server.sh`` starts (the ``llama_server_url`` fixture), and the answer
cache (its lines in order), the label file and the reports are compared, leaving out only what times the run
(latency, seconds, the concurrency itself). A run interrupted by a real KeyboardInterrupt (``interrupt_main``,
what Ctrl-C raises) while requests are in flight (held at a forwarding proxy until then, so the run cannot end
first) leaves an in-order prefix of the sequential cache, and resuming it gives the whole.

Identical means identical given the server's answers: against a server that decodes one request at a time (CI's
llama-cpp-python server, or ``ICR2_LLAMA_SERVER=native ICR2_LLAMA_PARALLEL=1``) every answer and log-probability is
the same. A batching server (llama-server with several slots) may itself give slightly different logits to a
request decoded beside others (measured here: P(yes) within 0.03, the same decisions and greedy answers), which no
client can change; run these tests against a one-slot server to test the client exactly.

Failed requests: a real forwarding proxy sits in front of the real server and answers 503 where told to (the
server itself is never faked). A request failing once is retried (tenacity) and the run ends as the sequential
one; a question whose requests fail every time is recorded as failed, not lost, and a later run answers it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from icr2_components.backends import load_backend
from icr2_components.evaluation.compare import run as compare_module
from icr2_components.evaluation.compare.cache import cache_lines
from icr2_components.evaluation.compare.run import run_compare
from icr2_components.evaluation.gates.need_labels import NeedQuestion, label_questions
from icr2_components.readers import ServedChatReader
from icr2_components.testing import ForwardingProxy
from icr2_components.testing.forwarding_proxy import ProxyReply

pytestmark = pytest.mark.llama_server

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
PIPELINES = ["pipelines/closed_book.yaml", "pipelines/oracle.yaml"]
SETTINGS = {"limit": 2, "max_new_tokens": 4, "context_types": "open,gold", "progress": False}
TIMING = {"latency_s", "answer_seconds"}
# a line's seal hashes its whole content, timing included (evaluation/compare/cache.py)
SEAL = {"record_sha", "replaces"}


def backend_file(tmp_path: Path, url: str, max_retries: int = 2, timeout_s: int = 120) -> Path:
    text = (REPO / "backends" / "llama_cpp_server.yaml").read_text().replace("http://127.0.0.1:8089/v1", url)
    file = tmp_path / f"llama-{abs(hash(url))}-{max_retries}-{timeout_s}.yaml"
    file.write_text(text.replace("max_retries: 2", f"max_retries: {max_retries}")
                    .replace("timeout_s: 120", f"timeout_s: {timeout_s}"))
    return file


def lines(path: Path, drop: tuple[str, ...] = ()) -> list[dict]:
    """The cache's records in file order, without what times them (and the ``drop`` fields)."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING | SEAL and k not in drop}
            for line in cache_lines(path)]


def untimed(value):
    """``value`` without latency figures (the report's latency_s metric and its paired tests time the run)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k != "latency_s"}
    if isinstance(value, list):
        return [untimed(v) for v in value if not (isinstance(v, dict) and v.get("metric") == "latency_s")]
    return value


def comparable_report(report: dict) -> str:
    """The report as JSON (NaN == NaN there), without what times the run or names its folder."""
    run = {k: v for k, v in report["run"].items()
           if k not in ("generation_seconds", "concurrency", "cache", "question_ids_file", "answer_wall_seconds",
                        "answers_per_second")}
    return json.dumps(untimed({**{k: v for k, v in report.items() if k != "files"}, "run": run}), sort_keys=True,
                      default=str)


@pytest.fixture(scope="module")
def sequential(llama_server_url, tmp_path_factory):
    """compare, one request at a time: the reference."""
    out = tmp_path_factory.mktemp("sequential")
    backend = load_backend(backend_file(out, llama_server_url))
    report = run_compare(PIPELINES, out_dir=out / "run", backend=backend, concurrency=1, **SETTINGS)
    return out / "run", report


def test_concurrent_compare_writes_the_sequential_cache_in_order_and_the_same_report(sequential, llama_server_url,
                                                                                   tmp_path):
    reference_dir, reference = sequential
    backend = load_backend(backend_file(tmp_path, llama_server_url))
    report = run_compare(PIPELINES, out_dir=tmp_path / "run", backend=backend, concurrency=4, **SETTINGS)
    assert report["run"]["concurrency"] == 4 and reference["run"]["concurrency"] == 1
    assert report["run"]["counters"]["model_runs"] >= 6  # real answers, not a cache hit
    assert lines(tmp_path / "run" / "answers.jsonl") == lines(reference_dir / "answers.jsonl")
    assert comparable_report(report) == comparable_report(reference)


def test_an_interrupted_concurrent_compare_leaves_a_sequential_prefix_and_resumes_to_the_whole(
        sequential, llama_server_url, tmp_path):
    reference_dir, reference = sequential
    # through the proxy the key and pipeline hash cover its URL: compared without them
    hashed = ("key", "pipeline_hash")
    expected = lines(reference_dir / "answers.jsonl", hashed)
    cache = tmp_path / "run" / "answers.jsonl.gz"
    # the second question's requests wait at the proxy until Ctrl-C is pressed: the run cannot end first, however
    # slow or fast the server, and is interrupted with requests in flight (the first question's are answered)
    released = threading.Event()
    proxy = FailingProxy(llama_server_url.rstrip("/").removesuffix("/v1"), expected[-1]["query"], once=0,
                         held=released)
    done = threading.Event()

    def press_ctrl_c_after_three_answers():
        # the deadline only stops a broken run from waiting on held requests for ever (it then ends uninterrupted
        # and the test fails): a working one is interrupted as soon as the first question is answered
        deadline = time.monotonic() + 900
        while not done.is_set() and time.monotonic() < deadline:
            if proxy.holding and cache.exists() and len(cache_lines(cache)) >= 3:
                # a real SIGINT, as Ctrl-C sends: unlike _thread.interrupt_main it wakes a main thread blocked on a
                # lock, while the held requests still keep the run from ending (interrupt_main's pending interrupt
                # could run inside a finaliser, where Python drops it, and the run then ended uninterrupted)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                break
            time.sleep(0.01)
        done.wait(1.0)
        released.set()

    watcher = threading.Thread(target=press_ctrl_c_after_three_answers, daemon=True)
    # Python's own Ctrl-C handler for this run: a pytest started in the background by a non-interactive shell
    # (`pytest &` in a script) inherits SIGINT ignored, which Python keeps (SIG_IGN), and the SIGINT would be lost.
    # No test leaves a handler of its own behind (each test's before/after was checked; the one SIGINT handler the
    # suite sets before this test is asyncio.run's, inside ragas' ROUGE-L scoring, and asyncio restores it).
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # held from the start, the second question's first request must not time out while the first is answered
        backend = load_backend(backend_file(tmp_path, proxy.url, timeout_s=900))
        watcher.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_compare(PIPELINES, out_dir=tmp_path / "run", backend=backend, concurrency=4, **SETTINGS)
        finally:
            done.set()
            released.set()
            watcher.join()
        written = lines(cache, hashed)
        assert 3 <= len(written) < len(expected)
        assert written == expected[: len(written)]  # an in-order prefix: nothing later was written before it
        report = run_compare(PIPELINES, out_dir=tmp_path / "run", backend=backend, concurrency=4, **SETTINGS)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        proxy.close()
    assert lines(cache, hashed) == expected
    assert report["run"]["counters"]["cached"] == len(written)
    for part in ("summary", "paired"):  # the run's counters differ: this one found some answers cached
        assert json.dumps(untimed(report[part]), sort_keys=True) == json.dumps(untimed(reference[part]), sort_keys=True)


class FailingProxy(ForwardingProxy):
    """A real HTTP proxy in front of the real server: chat requests whose body contains a marker get 503, the
    first ``once`` such requests only, or all of them with ``once=None``; everything else is forwarded. With
    ``held``, the marked requests it forwards wait until that event is set (``holding`` counts those waiting)."""

    def __init__(self, target_root: str, marker: str, once: int | None, held: threading.Event | None = None) -> None:
        self.marker, self.once, self.failed = marker, once, 0
        self.held, self.holding = held, 0
        super().__init__(target_root, timeout_s=120)

    def exchange(self, method, path, body, forward):
        if self.is_chat(method, path) and self.marker.encode() in body:
            with self.lock:
                fail = self.once is None or self.failed < self.once
                self.failed += int(fail)
            if fail:
                return ProxyReply(503, b'{"error": {"message": "injected by the test proxy"}}')
            if self.held is not None:
                with self.lock:
                    self.holding += 1
                self.held.wait()
                with self.lock:
                    self.holding -= 1
        return forward()


def test_failed_requests_are_retried_then_recorded_as_failed_and_answered_by_the_next_run(
        sequential, llama_server_url, tmp_path, monkeypatch):
    reference_dir, _ = sequential
    # the pipeline hash (so the key) covers the backend's URL, here the proxy's: compared without them
    hashed = ("key", "pipeline_hash")
    expected = lines(reference_dir / "answers.jsonl", hashed)
    question = expected[0]["query"]  # the first question's requests are the ones that fail
    monkeypatch.setattr(compare_module, "REQUEST_ATTEMPTS", 2)
    root = llama_server_url.rstrip("/").removesuffix("/v1")

    # fails once: retried, and the run is the sequential one
    proxy = FailingProxy(root, question, once=1)
    try:
        backend = load_backend(backend_file(tmp_path, proxy.url, max_retries=0))
        report = run_compare(PIPELINES, out_dir=tmp_path / "flaky", backend=backend, concurrency=4, **SETTINGS)
    finally:
        proxy.close()
    assert proxy.failed == 1 and report["run"]["counters"]["failed_requests"] == 0
    assert lines(tmp_path / "flaky" / "answers.jsonl", hashed) == expected

    # fails every time: recorded as failed after the retries; the others are answered
    proxy = FailingProxy(root, question, once=None)
    try:
        backend = load_backend(backend_file(tmp_path, proxy.url, max_retries=0))
        report = run_compare(PIPELINES, out_dir=tmp_path / "down", backend=backend, concurrency=4, **SETTINGS)
        failed = [r for r in lines(tmp_path / "down" / "answers.jsonl", hashed) if r.get("failed_request")]
        assert failed and {r["query"] for r in failed} == {question}
        assert all(r["attempts"] == 2 and "503" in r["error"] for r in failed)
        assert report["run"]["counters"]["failed_requests"] == len(failed) == proxy.failed // 2
        # the next run, the same proxy forwarding everything again (the same URL: a pipeline's hash, so the cache
        # key, covers the server's URL), answers exactly those, and ends with every answer
        proxy.once = 0
        report = run_compare(PIPELINES, out_dir=tmp_path / "down", backend=backend, concurrency=4, **SETTINGS)
    finally:
        proxy.close()
    counters = report["run"]["counters"]
    # closed-book's failed answers under gold are reused from its (now answered) open one, as a sequential run does
    assert counters["model_runs"] + counters["reused_no_context"] == len(failed) and counters["model_runs"] > 0
    final = {
        r["key"]: {k: v for k, v in r.items() if k not in hashed} for r in lines(tmp_path / "down" / "answers.jsonl")
    }
    order = lambda r: (r["pipeline"], r["question_id"], r["context_type"])  # noqa: E731
    assert sorted(final.values(), key=order) == sorted(expected, key=order)


def test_concurrent_labelling_writes_the_sequential_label_file(llama_server_url, tmp_path):
    passages = ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany."]
    questions = [NeedQuestion(f"q{i}", q, [a], "test", passages) for i, (q, a) in enumerate([
        ("What is the capital of France?", "Paris"), ("What is the capital of Germany?", "Berlin"),
        ("Who wrote Hamlet?", "Shakespeare")])]
    reader = ServedChatReader(api_base_url=llama_server_url, model=MODEL, max_new_tokens=4, context_length=8192)
    one = label_questions(questions, reader, "served-test", tmp_path / "one.jsonl", progress=False, concurrency=1)
    four = label_questions(questions, reader, "served-test", tmp_path / "four.jsonl", progress=False, concurrency=4)
    assert lines(tmp_path / "four.jsonl") == lines(tmp_path / "one.jsonl")
    assert len(lines(tmp_path / "one.jsonl")) == 3
    assert {k: v for k, v in four.items() if k not in ("out", "concurrency", "mean_seconds_per_question")} == \
           {k: v for k, v in one.items() if k not in ("out", "concurrency", "mean_seconds_per_question")}


def test_a_served_gate_asked_concurrently_decides_as_asked_one_at_a_time(llama_server_url):
    from icr2_components.evaluation.gates.gate_methods import parse_methods, run_methods
    from icr2_components.evaluation.gates.need_labels import LabelledQuestion

    labelled = [LabelledQuestion(f"q{i}", q, "test", False, True, "context_only", True, "r") for i, q in enumerate([
        "Who won the 2024 Nobel Prize in Physics?", "What is the capital of France?",
        "Who is the current CEO of Twitter?", "What is 2 + 2?"])]
    server = {"api_base_url": llama_server_url, "model": MODEL, "timeout_s": 120, "max_retries": 2}
    specs = parse_methods("vanilla")
    one = run_methods(specs, labelled, model=None, today="2025-01-01", progress=False, gate_options={"server": server},
                      concurrency=1)
    four = run_methods(specs, labelled, model=None, today="2025-01-01", progress=False, gate_options={"server": server},
                       concurrency=4)
    assert four["vanilla"]["scores"] is not None
    # llama-server batches concurrent requests across its slots, and a batch of 4 is not bit-for-bit a batch of 1
    # (llama.cpp issue 7052, PR 6950): the scores agree to rounding, the decisions exactly. An exact comparison of
    # the scores failed once in five runs of this file.
    assert four["vanilla"]["decisions"] == one["vanilla"]["decisions"]
    assert four["vanilla"]["scores"] == pytest.approx(one["vanilla"]["scores"], abs=0.02)
    assert {k: v for k, v in four["vanilla"].items() if k != "scores"} == \
        {k: v for k, v in one["vanilla"].items() if k != "scores"}


class CountingProxy(ForwardingProxy):
    """A real HTTP proxy in front of the real server that counts the chat requests in flight through it (the most at
    once); everything is forwarded, each chat after ``hold_s`` in flight (so that chats sent together overlap
    however fast the server answers)."""

    def __init__(self, target_root: str, hold_s: float = 0.0) -> None:
        self.in_flight = self.peak = self.chats = 0
        self.hold_s = hold_s
        super().__init__(target_root, timeout_s=300)

    def exchange(self, method, path, body, forward):
        chat = self.is_chat(method, path)
        with self.lock:
            self.in_flight += chat
            self.chats += chat
            self.peak = max(self.peak, self.in_flight)
        try:
            if chat and self.hold_s:
                time.sleep(self.hold_s)
            return forward()
        finally:
            with self.lock:
                self.in_flight -= chat


def test_serve_over_a_served_backend_runs_its_max_concurrency_at_once_for_many_openai_clients(llama_server_url,
                                                                                              tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    from tests.test_serve_openai import serving

    questions = ["What is the capital of France?", "Who wrote Hamlet?", "What is 2 + 2?", "Where is Berlin?",
                 "Who painted the Mona Lisa?", "What is the largest ocean?", "Who wrote Faust?", "What is water?"]
    # each chat held 0.5 s in the proxy before it goes on: on an idle fast machine the server answered 16 tokens of a
    # prompt it had just seen so quickly (~0.2 s) that the first chat ended before the third run sent its own (CI,
    # peak 2), as each run's tokenize request waits behind the chats the one-request server is answering
    proxy = CountingProxy(llama_server_url.rstrip("/").removesuffix("/v1"), hold_s=0.5)
    file = backend_file(tmp_path, proxy.url)
    file.write_text(file.read_text().replace("max_concurrency: 4", "max_concurrency: 3"))
    try:
        # no concurrency given: the backend file's 3; a queue long enough to admit every client
        with serving(REPO / "pipelines" / "closed_book.yaml", backend=load_backend(file), max_new_tokens=16,
                     max_queue=len(questions)) as (url, app):
            assert app.state.icr2_wrapper.concurrency == 3
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)

            def ask(question: str, stream: bool = False) -> str:
                messages = [{"role": "user", "content": question}]
                if not stream:
                    reply = client.chat.completions.create(model="closed_book", messages=messages)
                    return reply.choices[0].message.content
                return "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                    model="closed_book", messages=messages, stream=True) if chunk.choices)

            one_at_a_time = [ask(q) for q in questions]
            assert proxy.peak == 1 and all(one_at_a_time)
            for stream in (False, True):
                proxy.peak = 0
                with ThreadPoolExecutor(len(questions)) as pool:  # every client at once
                    answers = list(pool.map(ask, questions, [stream] * len(questions)))
                # the server saw the backend's 3 requests at once, never more; each client got its own answer
                assert proxy.peak == 3, (stream, proxy.peak)
                assert answers == one_at_a_time, stream
            assert proxy.chats == 3 * len(questions)
    finally:
        proxy.close()

