"""run_async of the components that wait on a server, against the real llama.cpp servers (never a mock).

The served reader and the served gate answer through OpenAI's async client: the same replies, errors and decisions
as their ``run``. Four ``Pipeline.run_async`` calls awaited together through the served reader against llama.cpp's
batching ``llama-server`` (4 slots, ``scripts/llama_server.sh start native`` on port ``ICR2_LLAMA_NATIVE_PORT``,
default 8090, started here when nothing serves there) are at the server at once and worked on together.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage

from icr2_components.builders.prompt_builder import CorpusInContextPromptBuilder
from icr2_components.errors import ContextTooLongError
from icr2_components.models.served_model import ServedModelError, ServedTokenizer
from icr2_components.readers import ServedChatReader
from icr2_components.testing import ForwardingProxy
from tests.llama_server_fixtures import model_alias, run_script, served_models

pytestmark = pytest.mark.llama_server

MODEL = "smollm2-135m-instruct"
PARIS = [Document(id="p1", content="Paris is the capital and largest city of France.", meta={"title": "Paris"}),
         Document(id="p2", content="Berlin is the capital of Germany.", meta={"title": "Berlin"})]
FRANCE = [ChatMessage.from_user("What is the capital of France? Answer in a few words.")]


@pytest.fixture(scope="module")
def reader(llama_server_url):
    return ServedChatReader(api_base_url=llama_server_url, model=MODEL, max_new_tokens=16, context_length=8192)


def test_run_async_answers_as_run_does(reader):
    replies = reader.run(messages=FRANCE)["replies"]
    awaited = asyncio.run(reader.run_async(messages=FRANCE))["replies"]
    assert "Paris" in awaited[0].text and awaited[0].text == replies[0].text  # greedy: the same answer
    meta = awaited[0].meta
    assert meta["prompt_tokens"] == replies[0].meta["prompt_tokens"] and 0 < meta["completion_tokens"] <= 16
    assert meta["latency_s"] > 0 and meta["model"]
    # a second event loop (a second asyncio.run) gets a client of its own, not the first loop's closed one
    assert asyncio.run(reader.run_async(messages=FRANCE, max_new_tokens=3))["replies"][0].meta["completion_tokens"] == 3


def test_the_async_prompt_check_counts_as_the_sync_one(reader, llama_server_url):
    long_prompt = [ChatMessage.from_user("word " * 9000)]
    with pytest.raises(ContextTooLongError, match="accepts 8176 \\(8192 context minus max_new_tokens=16\\)"):
        asyncio.run(reader.run_async(messages=long_prompt))
    assert asyncio.run(reader.prompt_tokens_async(FRANCE)) == reader.prompt_tokens(FRANCE)
    tokenizer = ServedTokenizer(llama_server_url, MODEL)
    texts = [d.content for d in PARIS] + ["Ünïcødé — text, with 2024 numbers & symbols: ∑."]
    assert asyncio.run(tokenizer.count_many_async(texts)) == ServedTokenizer(llama_server_url, MODEL).count_many(texts)


def test_run_async_against_a_down_server_is_one_line_within_the_timeout():
    reader = ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model=MODEL, timeout_s=5, max_retries=1,
                              context_length=8192, tokenizer=None)
    start = time.monotonic()
    with pytest.raises(ServedModelError) as caught:
        asyncio.run(reader.run_async(messages=[ChatMessage.from_user("hi")]))
    assert time.monotonic() - start < 20
    assert "\n" not in str(caught.value) and "not reachable" in str(caught.value)
    counting = ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model=MODEL, timeout_s=5, max_retries=1,
                                context_length=8192)
    with pytest.raises(ServedModelError, match="tokenize is not reachable"):  # the pre-check's tokenize request
        asyncio.run(counting.run_async(messages=[ChatMessage.from_user("hi")]))


def test_the_served_gate_decides_the_same_awaited(llama_server_url):
    from icr2_components.gates import TimeAwareRetrievalGate

    server = {"api_base_url": llama_server_url, "model": MODEL, "timeout_s": 120, "max_retries": 2}
    for method in ("vanilla", "ta_are"):
        gate = TimeAwareRetrievalGate(method=method, model=None, today="2025-01-01", server=server)
        gate.warm_up()
        query = "Who won the 2024 Nobel Prize in Physics?"
        ran = gate.run(query=query)
        awaited = asyncio.run(gate.run_async(query=query))
        assert set(awaited) == set(ran) and awaited["decision"]["retrieve"] == ran["decision"]["retrieve"]
        assert awaited["decision"]["p_yes"] == pytest.approx(ran["decision"]["p_yes"], abs=1e-6)
        assert awaited["decision"]["scoring"] == "top_logprobs" and gate.stats["decisions"] == 2


def _reading_pipeline(url: str, max_new_tokens: int) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("prompt", CorpusInContextPromptBuilder())
    # no prompt cache: each request processes its prompt, alone or beside others, so the times compare like with like
    pipeline.add_component("reader", ServedChatReader(
        api_base_url=url, model=MODEL, max_new_tokens=max_new_tokens, context_length=8192,
        generation_kwargs={"extra_body": {"cache_prompt": False, "ignore_eos": True}}))
    pipeline.connect("prompt.prompt", "reader.messages")
    return pipeline


def test_a_pipeline_with_the_served_reader_round_trips_and_runs_async(llama_server_url):
    pipeline = _reading_pipeline(llama_server_url, 16)
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["icr2_components.*"])
    data = {"prompt": {"query": "What is the capital of France?", "documents": PARIS}}
    result = asyncio.run(loaded.run_async(data))
    assert "Paris" in result["reader"]["replies"][0].text


@pytest.fixture(scope="module")
def native_server_url():
    """llama.cpp's own llama-server with 4 slots on its own port (compiled once per machine, with llama-cpp-python)."""
    port = os.environ.get("ICR2_LLAMA_NATIVE_PORT", "8090")
    url = f"http://127.0.0.1:{port}/v1"
    started_here = False
    if model_alias() not in (served_models(url) or []):
        # the worker's share of the cores (conftest's ICR2_LLAMA_THREADS, inherited): the test reads the server's own
        # timings, which show the four requests worked on together on any thread count
        environment = {"ICR2_LLAMA_PORT": port, "ICR2_LLAMA_PARALLEL": "4", "ICR2_LLAMA_SERVER": "native"}
        result = run_script("start", timeout=2400, env=environment)
        if result.returncode != 0 or model_alias() not in (served_models(url) or []):
            pytest.fail(f"`ICR2_LLAMA_PORT={port} ICR2_LLAMA_PARALLEL=4 bash scripts/llama_server.sh start native` "
                        f"failed (exit {result.returncode}):\n" + (result.stdout + result.stderr)[-4000:])
        started_here = True
    yield url
    if started_here and os.environ.get("ICR2_LLAMA_KEEP", "") not in ("1", "true", "yes"):
        run_script("stop", timeout=120, env={"ICR2_LLAMA_PORT": port})


class TimingProxy(ForwardingProxy):
    """A real proxy in front of the batching server: the chats in flight at once (the most), and for each chat of the
    current round when its reply came back and how long the server says it worked on it (llama-server's own
    ``timings`` in the reply: prompt processing plus decoding, without any wait in its queue)."""

    def __init__(self, target_root: str) -> None:
        super().__init__(target_root, timeout_s=300)
        self.in_flight = self.peak = 0
        self.worked: list[tuple[float, float]] = []  # (reply back at, the server's own seconds of work)

    def exchange(self, method, path, body, forward):
        if not self.is_chat(method, path):
            return forward()
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            reply = forward()
        finally:
            with self.lock:
                self.in_flight -= 1
        timings = json.loads(reply.body).get("timings") or {}
        with self.lock:
            self.worked.append((time.perf_counter(), (timings["prompt_ms"] + timings["predicted_ms"]) / 1000))
        return reply


@pytest.mark.slow
def test_four_concurrent_pipeline_runs_are_decoded_together_by_a_batching_server(native_server_url):
    """Four ``Pipeline.run_async`` calls through the served reader reach llama.cpp's 4-slot server at once and are
    worked on together: the proxy in front of it sees 4 chats in flight, and by the server's own timings of each
    chat (prompt processing and decoding, not its queue) the four spans of work overlap. Served one after another
    they would follow each other. Wall times depend on what else the cores do (a busy test worker beside this
    all-core server stretched four calls to 19x one), so they are printed, not asserted: what four cost against one
    is measured in docs/benchmarks/serving-and-speed.md ("Overlapping requests with `Pipeline.run_async`")."""
    tokens = 48
    proxy = TimingProxy(native_server_url.removesuffix("/v1"))
    pipeline = _reading_pipeline(proxy.url, tokens)
    data = {"prompt": {"query": "Describe the city of Paris in detail.", "documents": PARIS}}

    async def timed(calls: int) -> tuple[float, list, list[tuple[float, float]], int]:
        proxy.worked, proxy.peak = [], 0
        start = time.perf_counter()
        results = await asyncio.gather(*(pipeline.run_async(data) for _ in range(calls)))
        return time.perf_counter() - start, results, list(proxy.worked), proxy.peak

    async def measure():
        await timed(1)  # connections and the model's first request
        return await timed(1), await timed(4)

    try:
        (one, *_), (four, results, worked, peak) = asyncio.run(measure())
    finally:
        proxy.close()
    print(f"\nServedChatReader through Pipeline.run_async, {tokens} tokens each, llama-server 4 slots: one call "
          f"{one:.2f} s, four at once {four:.2f} s ({four / one:.2f}x; wall times, an indication)")
    assert peak == 4, worked  # all four at the server at once
    assert len(worked) == 4
    spans = [(back - seconds, back) for back, seconds in worked]  # when the server worked on each chat
    assert max(begin for begin, _ in spans) < min(end for _, end in spans), spans  # all four at the same time
    # the same work in every request
    assert all(r["reader"]["replies"][0].meta["completion_tokens"] == tokens for r in results)
