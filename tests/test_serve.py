"""icr2 serve over real HTTP on a free loopback port: a real SmolLM2 answer, malformed requests -> 4xx with a
reason, an oversize body -> 413, a prompt over the model's context -> 413 naming the limit, an internal pipeline
failure -> JSON 500, and pipelines the server must refuse."""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_BODY = 4096
MAX_QUERY = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen | None = None, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"icr2 serve exited with {process.returncode}: {process.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/status", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"server at {url} not ready in {timeout} s")


@pytest.fixture(scope="module")
def closed_book_server():
    """`icr2 serve pipelines/closed_book.yaml` in a subprocess (the real CLI), 8 new tokens per answer."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "icr2"), "serve", "pipelines/closed_book.yaml", "--port", str(port),
         "--max-new-tokens", "8", "--max-body-bytes", str(MAX_BODY), "--max-query-chars", str(MAX_QUERY)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def post(url: str, content: bytes, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/closed_book/run", content=content, headers={"content-type": "application/json"},
                      timeout=180, **kwargs)


def test_closed_book_answers_a_real_question(closed_book_server):
    response = post(closed_book_server, json.dumps({"query": "What is the capital of France?"}).encode())
    assert response.status_code == 200, response.text
    replies = response.json()["result"]["replies"]
    assert len(replies) == 1 and isinstance(replies[0], str)
    assert "paris" in replies[0].lower()


@pytest.mark.parametrize("body, status, words", [
    (b'{"query": "unterminated', 400, ["not valid json"]),
    (b"", 422, ["field required"]),
    (b"{}", 422, ["query", "field required"]),
    (b'{"query": 42}', 422, ["query", "valid string"]),
    (b'{"query": "   "}', 422, ["query", "at least 1 character"]),
    (json.dumps({"query": "q" * (MAX_QUERY + 1)}).encode(), 422, ["query", f"at most {MAX_QUERY}"]),
    (b'{"query": "who?", "top_k": 3}', 422, ["top_k", "extra inputs"]),
    (b'["who?"]', 422, ["dictionary or object"]),
])
def test_malformed_requests_get_4xx_with_a_reason(closed_book_server, body, status, words):
    response = post(closed_book_server, body)
    assert response.status_code == status, response.text
    payload = response.json()
    assert payload["status"] == status and payload["error"] in {"malformed_json", "invalid_request"}
    assert all(word in payload["reason"].lower() for word in words), payload["reason"]


def test_oversize_body_gets_413_declared_or_chunked(closed_book_server):
    big = json.dumps({"query": "x" * (MAX_BODY + 10)}).encode()
    response = post(closed_book_server, big)
    assert response.status_code == 413 and "4096 bytes" in response.json()["reason"]

    def chunks():  # no Content-Length: the server counts what it reads
        yield b'{"query": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    response = post(closed_book_server, chunks())
    assert response.status_code == 413 and response.json()["error"] == "request_too_large"


def test_only_the_run_route_and_status_are_served(closed_book_server):
    status = httpx.get(f"{closed_book_server}/status", timeout=10).json()
    assert status["pipelines"] == ["closed_book"]
    response = httpx.post(f"{closed_book_server}/deploy-yaml", json={"name": "x", "source_code": "components: {}"},
                          timeout=10)
    assert response.status_code == 404 and "not served" in response.json()["reason"]
    assert httpx.get(f"{closed_book_server}/closed_book/run", timeout=10).status_code == 405


def test_non_loopback_host_is_refused_without_allow_remote():
    result = subprocess.run([str(Path(sys.executable).parent / "icr2"), "serve", "pipelines/closed_book.yaml",
                             "--host", "0.0.0.0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "not loopback" in result.stderr


def test_over_long_prompt_is_413_naming_the_limit_and_an_internal_failure_stays_500(smollm2, monkeypatch):
    """The oracle given a passage, or a question, longer than SmolLM2's context: the reader refuses it and the
    client is told so with a 413 naming the limit; a failure inside the pipeline that the request did not cause
    is still a JSON 500."""
    import functools

    import uvicorn

    from icr2_components.readers.local_chat_reader import LocalChatReader
    from icr2_components.serving import create_serving_app

    app = create_serving_app(str(ROOT / "pipelines" / "oracle.yaml"), max_body_bytes=400_000, max_new_tokens=4,
                             max_query_chars=200_000)
    context = smollm2[0].config.max_position_embeddings
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=60)
        passage = " ".join(f"word{i}" for i in range(20_000))
        long_passage = httpx.post(f"{url}/oracle/run", json={"query": "what?", "documents": [
            {"content": passage, "meta": {"title": "Long"}}]}, timeout=180)
        long_question = httpx.post(f"{url}/oracle/run", json={"query": passage, "documents": [
            {"content": "Paris is the capital of France.", "meta": {"title": "Paris"}}]}, timeout=180)
        for response in (long_passage, long_question):
            assert response.status_code == 413, response.text
            payload = response.json()
            assert payload["error"] == "context_too_long" and payload["status"] == 413
            assert re.search(r"has \d+ tokens but smollm2-135m-instruct accepts \d+", payload["reason"]), payload
            assert f"({context} context" in payload["reason"]
        missing_docs = httpx.post(f"{url}/oracle/run", json={"query": "what?"}, timeout=30)
        assert missing_docs.status_code == 422 and "documents" in missing_docs.json()["reason"]
        empty_passage = httpx.post(f"{url}/oracle/run", json={"query": "q", "documents": [{"content": ""}]}, timeout=30)
        assert empty_passage.status_code == 422 and "documents.0.content" in empty_passage.json()["reason"]

        @functools.wraps(LocalChatReader.run)  # Haystack reads the sockets from run's signature
        def broken(self, *args, **kwargs):
            raise RuntimeError("simulated device failure")

        monkeypatch.setattr(LocalChatReader, "run", broken)
        failed = httpx.post(f"{url}/oracle/run", json={"query": "q", "documents": [{"content": "short"}]}, timeout=60)
        assert failed.status_code == 500
        assert failed.json()["error"] == "pipeline_failed" and "simulated device failure" in failed.json()["reason"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_serving_refuses_undeclared_io_and_foreign_modules(tmp_path):
    from icr2_components.evaluation.pipeline_spec import PipelineSpecError
    from icr2_components.pipeline_loading import PipelineLoadError
    from icr2_components.serving import create_serving_app

    undeclared = tmp_path / "undeclared.yaml"
    undeclared.write_text((ROOT / "pipelines" / "closed_book.yaml").read_text().split("\ninputs:")[0])
    with pytest.raises(PipelineSpecError, match="declares no `inputs`"):
        create_serving_app(str(undeclared))
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text("components:\n  x:\n    type: os.system\n    init_parameters: {}\nconnections: []\n"
                       "inputs: {query: x.command}\noutputs: {replies: x.out}\n")
    with pytest.raises(PipelineLoadError, match="icr2_components"):
        create_serving_app(str(foreign))


def test_only_input_caused_errors_are_refused_with_4xx():
    """The mapping behind the 413: found through Haystack's wrapping, and nothing else is mapped."""
    from haystack.core.errors import PipelineRuntimeError

    from icr2_components.errors import ContextTooLongError, MissingContextError
    from icr2_components.serving import refusal_for

    def wrapped(error):
        try:
            try:
                raise error
            except Exception as inner:
                raise PipelineRuntimeError.from_exception("reader", object, inner) from inner
        except PipelineRuntimeError as outer:
            return outer

    refusal = refusal_for(wrapped(ContextTooLongError("The prompt has 9000 tokens but m accepts 8160")))
    assert refusal.status_code == 413 and refusal.error == "context_too_long" and "accepts 8160" in refusal.detail
    missing = refusal_for(wrapped(MissingContextError("Technique 'cad' was run without a context")))
    assert missing.status_code == 422 and missing.error == "missing_context"
    assert refusal_for(wrapped(ValueError("bad component setting"))) is None
    assert refusal_for(wrapped(RuntimeError("device failure"))) is None
