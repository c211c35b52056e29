"""icr2 serve over real HTTP on a free loopback port: a real SmolLM2 answer, malformed requests -> 4xx with a
reason, an oversize body -> 413, a prompt over the model's context -> 413 naming the limit, an internal pipeline
failure -> JSON 500, and pipelines the server must refuse. Every answer is checked against what the server's own
``/openapi.json`` documents for that path, method and status (jsonschema), and that document lists exactly the
paths the server answers."""

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
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
MAX_BODY = 4096
MAX_QUERY = 200
RUN = "/closed_book/run"


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


@pytest.fixture(scope="module")
def openapi(closed_book_server) -> dict:
    response = httpx.get(f"{closed_book_server}/openapi.json", timeout=10)
    assert response.status_code == 200
    return response.json()


def documented_schema(openapi: dict, path: str, method: str, status: int) -> Draft202012Validator:
    """The body schema /openapi.json gives for this answer; fails when the status is not documented there."""
    responses = openapi["paths"][path][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}; /openapi.json lists {sorted(responses)}"
    schema = responses[str(status)]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": openapi["components"]})


def assert_documented(openapi: dict, path: str, method: str, status: int, content_type: str, body: bytes) -> dict:
    """The answer is JSON and its body validates against the documented schema of its status."""
    assert content_type.split(";")[0] == "application/json", (status, content_type, body)
    payload = json.loads(body)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in documented_schema(openapi, path, method, status).iter_errors(payload)]
    assert not errors, (status, payload, errors)
    return payload


def check(openapi: dict, response: httpx.Response) -> dict:
    return assert_documented(openapi, response.request.url.path, response.request.method, response.status_code,
                             response.headers.get("content-type", ""), response.content)


def post(url: str, content: bytes, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}{RUN}", content=content, headers={"content-type": "application/json"},
                      timeout=180, **kwargs)


def raw_request(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are (no client fixes the headers) and read the answer until the server closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(request)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def test_closed_book_answers_a_real_question(closed_book_server, openapi):
    response = post(closed_book_server, json.dumps({"query": "What is the capital of France?"}).encode())
    assert response.status_code == 200, response.text
    replies = check(openapi, response)["result"]["replies"]
    assert len(replies) == 1 and isinstance(replies[0], str)
    assert "paris" in replies[0].lower()
    # the documented 200 is the declared outputs, concretely: `replies`, a list of strings, nothing else
    ok = documented_schema(openapi, RUN, "POST", 200)
    assert ok.is_valid({"result": {"replies": ["Paris"]}})
    for wrong in ({"result": {}}, {"result": {"replies": [{"text": "Paris"}]}}, {"result": "Paris"},
                  {"result": {"replies": ["Paris"], "documents": []}}, {}):
        assert not ok.is_valid(wrong), wrong


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
def test_malformed_requests_get_4xx_with_a_reason(closed_book_server, openapi, body, status, words):
    response = post(closed_book_server, body)
    assert response.status_code == status, response.text
    payload = check(openapi, response)
    assert payload["status"] == status and payload["error"] in {"malformed_json", "invalid_request"}
    assert all(word in payload["reason"].lower() for word in words), payload["reason"]


def test_oversize_body_gets_413_declared_or_chunked(closed_book_server, openapi):
    big = json.dumps({"query": "x" * (MAX_BODY + 10)}).encode()
    response = post(closed_book_server, big)
    assert response.status_code == 413 and "4096 bytes" in response.json()["reason"]
    assert check(openapi, response)["error"] == "request_too_large"

    def chunks():  # no Content-Length: the server counts what it reads
        yield b'{"query": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    response = post(closed_book_server, chunks())
    assert response.status_code == 413 and check(openapi, response)["error"] == "request_too_large"


def test_openapi_lists_exactly_the_paths_the_server_answers(closed_book_server, openapi):
    """Every documented operation is answered (not 404) with a documented status and body; every route the app
    had from hayhooks or FastAPI beyond those (deploy, undeploy, draw, hayhooks' Responses and Files, /docs,
    /redoc) is a JSON 404. The OpenAI routes are ours (tests/test_serve_openai.py drives them with the client)."""
    from icr2_components.serving.app import PUBLIC_PATHS

    operations = {(path, method) for path, item in openapi["paths"].items() for method in item}
    assert operations == {("/status", "get"), ("/openapi.json", "get"), (RUN, "post"), ("/v1/models", "get"),
                          ("/models", "get"), ("/v1/chat/completions", "post"), ("/chat/completions", "post"),
                          ("/health/live", "get"), ("/health/ready", "get")}
    assert set(openapi["paths"]) == PUBLIC_PATHS | {RUN}
    for path, method in sorted(operations):
        body = {"content": b"{}", "headers": {"content-type": "application/json"}} if method == "post" else {}
        response = httpx.request(method.upper(), f"{closed_book_server}{path}", timeout=30, **body)
        assert response.status_code != 404, (method, path, response.text)
        check(openapi, response)  # {} on a POST route: a documented 422 (400 on OpenAI's); the GETs: a 200
    # their documented 413: a GET's big body
    for path in ("/status", "/openapi.json", "/v1/models", "/models", "/health/live", "/health/ready"):
        response = httpx.request("GET", f"{closed_book_server}{path}", content=b"x" * (MAX_BODY + 1), timeout=30)
        assert response.status_code == 413, (path, response.text)
        payload = check(openapi, response)
        assert (payload["error"]["code"] if "/models" in path else payload["error"]) == "request_too_large"
    # the run route documents each status it answers (each produced by a real request in this file; 408, 429 and 504
    # in tests/test_serve_openai.py) and no other
    assert sorted(openapi["paths"][RUN]["post"]["responses"]) == ["200", "400", "408", "413", "422", "429", "500",
                                                                   "504"]
    for path in ("/v1/chat/completions", "/chat/completions"):  # OpenAI's: invalid input is a 400, not a 422
        assert sorted(openapi["paths"][path]["post"]["responses"]) == ["200", "400", "404", "408", "413", "429", "500",
                                                                       "504"]
    # no FastAPI default left: errors are {error, reason, status}, never {"detail": [...]}
    assert not {"HTTPValidationError", "ValidationError"} & set(openapi["components"]["schemas"])
    assert '"detail"' not in json.dumps(openapi)

    status = httpx.get(f"{closed_book_server}/status", timeout=10).json()
    assert status["pipelines"] == ["closed_book"]
    for method, path in [("POST", "/deploy-yaml"), ("POST", "/deploy_files"), ("POST", "/undeploy/closed_book"),
                         ("GET", "/draw/closed_book"), ("GET", "/status/closed_book"), ("POST", "/responses"),
                         ("POST", "/files"), ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/docs/oauth2-redirect"),
                         ("GET", f"{RUN}/")]:
        response = httpx.request(method, f"{closed_book_server}{path}", timeout=10)
        assert response.status_code == 404, (method, path, response.status_code)
        assert response.json() == {"error": "not_found", "status": 404, "reason": response.json()["reason"]}
        assert "not served" in response.json()["reason"]
    for method, path in [("POST", "/v1/responses"), ("POST", "/v1/files"), ("GET", "/v1/models/closed_book")]:
        response = httpx.request(method, f"{closed_book_server}{path}", timeout=10)  # OpenAI's shape under /v1/
        assert response.status_code == 404, (method, path, response.status_code)
        assert response.json()["error"]["code"] == "not_found" and "not served" in response.json()["error"]["message"]
    for method, path in [("GET", RUN), ("POST", "/status"), ("HEAD", "/status"), ("HEAD", "/openapi.json")]:
        wrong_method = httpx.request(method, f"{closed_book_server}{path}", timeout=10)
        assert wrong_method.status_code == 405, (method, path)
        if method != "HEAD":
            reason = wrong_method.json()["reason"]
            assert wrong_method.json() == {"error": "method_not_allowed", "reason": reason, "status": 405}
            assert reason.startswith(f"{method} is not allowed on {path}; use "), reason


@pytest.mark.parametrize("method, path", [("POST", RUN), ("GET", "/status"), ("POST", "/v1/chat/completions")])
def test_a_content_length_that_is_not_a_number_gets_a_json_400(closed_book_server, openapi, method, path):
    """uvicorn's HTTP parser refuses the request before any app code runs (or knows the route); `icr2 serve`
    answers it as JSON, in the server-wide shape, which the OpenAI routes document too."""
    status, headers, body = raw_request(
        closed_book_server, f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: abc\r\n\r\n{}".encode())
    assert status == 400 and headers["connection"] == "close"
    payload = assert_documented(openapi, path, method, status, headers["content-type"], body)
    assert payload["error"] == "bad_request" and "Content-Length" in payload["reason"], payload


def test_a_body_that_is_not_utf8_or_not_sent_as_json_is_told_so(closed_book_server, openapi):
    latin1 = post(closed_book_server, '{"query": "caf\xe9"}'.encode("latin-1"))
    assert latin1.status_code == 400 and check(openapi, latin1)["error"] == "malformed_json"
    assert "utf-8" in latin1.json()["reason"].lower()
    form = httpx.post(f"{closed_book_server}{RUN}", content=b'{"query": "who?"}', timeout=30,
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 422 and check(openapi, form)["error"] == "invalid_request"
    assert "Content-Type: application/json" in form.json()["reason"], form.json()


def test_non_loopback_host_is_refused_without_allow_remote():
    result = subprocess.run([str(Path(sys.executable).parent / "icr2"), "serve", "pipelines/closed_book.yaml",
                             "--host", "0.0.0.0"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "not loopback" in result.stderr


def test_a_port_in_use_is_one_line_before_the_banner():
    """Before, the banner came first and uvicorn's own error after it, once the pipeline had loaded. The port is
    now bound before the pipeline loads: one line naming it, exit 1, no banner, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([str(Path(sys.executable).parent / "icr2"), "serve", "pipelines/closed_book.yaml",
                                 "--port", str(port)], check=False, cwd=ROOT, capture_output=True, text=True,
                                timeout=300)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "icr2 serve: POST" not in result.stdout, result.stdout  # no banner
    lines = result.stderr.strip().splitlines()
    assert lines == [f"icr2 serve: error: --port {port}: 127.0.0.1:{port} is already in use by another program; "
                     "stop it or serve on another port (icr2 serve --port N)."], result.stderr


def test_over_long_prompt_is_413_naming_the_limit_and_an_internal_failure_stays_500(smollm2, monkeypatch):
    """The oracle given a passage, or a question, longer than SmolLM2's context: the reader refuses it and the
    client is told so with a 413 naming the limit; a failure inside the pipeline that the request did not cause
    is still a JSON 500."""
    import functools

    import uvicorn

    from icr2_components.readers.local_chat_reader import LocalChatReader
    from icr2_components.serving import create_serving_app
    from icr2_components.serving.app import server_settings

    app = create_serving_app(str(ROOT / "pipelines" / "oracle.yaml"), max_body_bytes=400_000, max_new_tokens=4,
                             max_query_chars=200_000)
    context = smollm2[0].config.max_position_embeddings
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **server_settings()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=60)
        openapi = httpx.get(f"{url}/openapi.json", timeout=10).json()
        passage = " ".join(f"word{i}" for i in range(20_000))
        long_passage = httpx.post(f"{url}/oracle/run", json={"query": "what?", "documents": [
            {"content": passage, "meta": {"title": "Long"}}]}, timeout=180)
        long_question = httpx.post(f"{url}/oracle/run", json={"query": passage, "documents": [
            {"content": "Paris is the capital of France.", "meta": {"title": "Paris"}}]}, timeout=180)
        for response in (long_passage, long_question):
            assert response.status_code == 413, response.text
            payload = check(openapi, response)
            assert payload["error"] == "context_too_long" and payload["status"] == 413
            assert re.search(r"has \d+ tokens but smollm2-135m-instruct accepts \d+", payload["reason"]), payload
            assert f"({context} context" in payload["reason"]
        missing_docs = httpx.post(f"{url}/oracle/run", json={"query": "what?"}, timeout=30)
        assert missing_docs.status_code == 422 and "documents" in check(openapi, missing_docs)["reason"]
        empty_passage = httpx.post(f"{url}/oracle/run", json={"query": "q", "documents": [{"content": ""}]}, timeout=30)
        assert empty_passage.status_code == 422 and "documents.0.content" in empty_passage.json()["reason"]

        @functools.wraps(LocalChatReader.run)  # Haystack reads the sockets from run's signature
        def broken(self, *args, **kwargs):
            raise RuntimeError("simulated device failure")

        monkeypatch.setattr(LocalChatReader, "run", broken)
        failed = httpx.post(f"{url}/oracle/run", json={"query": "q", "documents": [{"content": "short"}]}, timeout=60)
        assert failed.status_code == 500 and check(openapi, failed)["status"] == 500
        assert failed.json()["error"] == "pipeline_failed" and "simulated device failure" in failed.json()["reason"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.unit
def test_serving_refuses_undeclared_io_and_foreign_modules(tmp_path):
    from icr2_components.pipeline_loading import PipelineLoadError
    from icr2_components.pipeline_spec import PipelineSpecError
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


@pytest.mark.unit
def test_only_input_caused_errors_are_refused_with_4xx():
    """The mapping behind the 413: found through Haystack's wrapping, and nothing else is mapped."""
    from haystack.core.errors import PipelineRuntimeError

    from icr2_components.errors import ContextTooLongError, MissingContextError
    from icr2_components.serving.refusals import refusal_for

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
