"""Bad requests to the real ``icr2 serve`` server: one server (the shipped closed-book pipeline over the llama.cpp
server, so that answers are quick), started on a free loopback port with short body and request limits, and many
requests a client could send: bodies that are not JSON or not the schema, wrong types and ranges, unknown models
and paths, over-long queries and bodies, a client that trickles its body or never sends it.

Each request is classified from what the client gets (and the server's stderr): a 4xx whose error names the field
or the limit is a clear error, a 2xx a right result when its check holds, a 5xx (or a traceback in the server's
stderr) a traceback, anything else an unclear error.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bad_input_cases.common import ICR2, REPO, llama_backend, wait_until_answering

BODY_TIMEOUT_S = 3
REQUEST_TIMEOUT_S = 120
MAX_QUERY_CHARS = 2000


@dataclass
class Request:
    """One request: ``send`` returns (status, parsed body or text, seconds); ``says`` are words the error must hold
    (in its message or param); ``right`` checks a 2xx answer (None: an error was due)."""

    what: str
    send: Callable[[str], tuple[int, Any, float]]
    says: tuple[str, ...] = ()
    right: Callable[[Any], tuple[bool, str]] | None = None
    within_s: float | None = None  # the answer must come within this many seconds
    extra: dict = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(path: str, body: Any = None, *, raw: bytes | None = None, content_type: str = "application/json",
         method: str = "POST") -> Callable[[str], tuple[int, Any, float]]:
    import httpx

    def send(url: str) -> tuple[int, Any, float]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        start = time.perf_counter()
        response = httpx.request(method, url + path, content=data, headers={"Content-Type": content_type},
                                 timeout=REQUEST_TIMEOUT_S + 30)
        seconds = time.perf_counter() - start
        try:
            parsed = response.json()
        except ValueError:
            parsed = response.text
        return response.status_code, parsed, seconds

    return send


def raw_socket(head: bytes, body_pieces: list[bytes], pause_s: float) -> Callable[[str], tuple[int, Any, float]]:
    """A client on a plain socket: the request head, then each piece of the body after ``pause_s``; the status is
    the server's answer (0 when it closed without one)."""

    def send(url: str) -> tuple[int, Any, float]:
        port = int(url.rsplit(":", 1)[1])
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S) as conn:
            conn.sendall(head)
            conn.settimeout(pause_s)
            received = b""
            for piece in body_pieces:
                try:
                    chunk = conn.recv(65536)
                    if chunk:
                        received += chunk
                        break
                    break  # closed
                except TimeoutError:
                    pass
                try:
                    conn.sendall(piece)
                except OSError:
                    break
            conn.settimeout(REQUEST_TIMEOUT_S)
            try:
                while b"\r\n\r\n" not in received or len(received) < received.find(b"\r\n\r\n") + 4 + 20:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    received += chunk
            except OSError:
                pass
        seconds = time.perf_counter() - start
        if not received.startswith(b"HTTP/"):
            return 0, received.decode(errors="replace")[:200], seconds
        status = int(received.split(b" ", 2)[1])
        body = received.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in received else b""
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = body.decode(errors="replace")
        return status, parsed, seconds

    return send


def answered(result: Any) -> tuple[bool, str]:
    """An OpenAI chat completion with one non-empty answer."""
    try:
        text = result["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return False, f"not a chat completion: {str(result)[:120]}"
    return bool(text.strip()), f"answered {text!r}"


def run_answered(result: Any) -> tuple[bool, str]:
    try:
        replies = result["result"]["replies"]
        text = replies[0]["text"] if isinstance(replies[0], dict) else str(replies[0])
    except (KeyError, IndexError, TypeError):
        return False, f"not a run answer: {str(result)[:120]}"
    return bool(text.strip()), f"answered {text[:60]!r}"


def requests() -> list[Request]:
    chat = "/v1/chat/completions"
    run = "/closed_book/run"
    user = [{"role": "user", "content": "What is the capital of France?"}]
    ok = {"model": "closed_book", "messages": user}
    long_query = "why " * (MAX_QUERY_CHARS // 4 + 10)
    head = (f"POST {chat} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 200\r\n\r\n").encode()
    return [
        Request("(a good chat completion)", post(chat, ok), right=answered),
        Request("(a good run request)", post(run, {"query": "What is the capital of France?"}), right=run_answered),
        Request("a body that is not JSON", post(chat, raw=b"{model: closed_book"), says=("JSON",)),
        Request("an empty body", post(chat, raw=b""), says=("body",)),
        Request("a JSON list as the body", post(chat, [ok]), says=("object",)),
        Request("no messages", post(chat, {"model": "closed_book"}), says=("messages",)),
        Request("messages: []", post(chat, {"model": "closed_book", "messages": []}), says=("messages",)),
        Request("messages: a string", post(chat, {"model": "closed_book", "messages": "hi"}), says=("messages",)),
        Request("a message without a role", post(chat, {"model": "closed_book", "messages": [{"content": "hi"}]}),
                says=("role",)),
        Request('role: "robot"', post(chat, {"model": "closed_book", "messages": [{"role": "robot",
                                                                                   "content": "hi"}]}),
                says=("role",)),
        Request("content: null", post(chat, {"model": "closed_book", "messages": [{"role": "user", "content": None}]}),
                says=("content",)),
        Request("content: 42", post(chat, {"model": "closed_book", "messages": [{"role": "user", "content": 42}]}),
                says=("content",)),
        Request('content: ""', post(chat, {"model": "closed_book", "messages": [{"role": "user", "content": ""}]}),
                says=("content",)),
        Request("only an assistant message (no question)",
                post(chat, {"model": "closed_book", "messages": [{"role": "assistant", "content": "Paris"}]}),
                says=("user",)),
        Request("an image_url content part", post(chat, {"model": "closed_book", "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}),
                says=("content", "not text")),
        Request("text content parts (OpenAI's list form)", post(chat, {"model": "closed_book", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}]}),
                right=answered),
        Request("no model", post(chat, {"messages": user}), says=("model",)),
        Request('model: "gpt-4"', post(chat, {**ok, "model": "gpt-4"}), says=("gpt-4",)),
        Request("model: 7", post(chat, {**ok, "model": 7}), says=("model",)),
        Request("max_tokens: 0", post(chat, {**ok, "max_tokens": 0}), says=("max_tokens",)),
        Request("max_tokens: -5", post(chat, {**ok, "max_tokens": -5}), says=("max_tokens",)),
        Request('max_tokens: "ten"', post(chat, {**ok, "max_tokens": "ten"}), says=("max_tokens",)),
        Request("max_tokens: 2.5", post(chat, {**ok, "max_tokens": 2.5}), says=("max_tokens",)),
        Request("max_completion_tokens: 0", post(chat, {**ok, "max_completion_tokens": 0}),
                says=("max_completion_tokens",)),
        Request("max_tokens: 1000000000 (may only lower the budget)", post(chat, {**ok, "max_tokens": 10**9}),
                right=answered),
        Request("n: 2", post(chat, {**ok, "n": 2}), says=("n",)),
        Request('stream: "yes"', post(chat, {**ok, "stream": "yes"}), says=("stream", "boolean")),
        Request('stream_options: {"include_usage": "yes"}', post(chat, {**ok, "stream": True,
                                                                         "stream_options": {"include_usage": "yes"}}),
                says=("include_usage",)),
        Request(f"a {len(long_query):,}-character question (limit {MAX_QUERY_CHARS:,})",
                post(chat, {**ok, "messages": [{"role": "user", "content": long_query}]}),
                says=(str(MAX_QUERY_CHARS),)),
        Request("a 70,000-byte body (limit 65,536)",
                post(chat, {**ok, "messages": [{"role": "system", "content": "x" * 70_000}, *user]}),
                says=("65536",)),
        Request("Content-Type: text/plain", post(chat, ok, content_type="text/plain"), says=("JSON",)),
        Request("GET on the chat route", post(chat, method="GET"), says=("GET",)),
        Request("POST to a path that is not served", post("/v1/embeddings", {"input": "x"}), says=("/v1/embeddings",)),
        Request("run: no query", post(run, {}), says=("query",)),
        Request('run: query ""', post(run, {"query": ""}), says=("query",)),
        Request("run: query 42", post(run, {"query": 42}), says=("query",)),
        Request("run: query null", post(run, {"query": None}), says=("query",)),
        Request("run: an unknown field", post(run, {"query": "Who?", "top_k": 3}), says=("top_k",)),
        Request(f"run: a {len(long_query):,}-character query", post(run, {"query": long_query}),
                says=(str(MAX_QUERY_CHARS),)),
        Request("a client that trickles its body (1 byte a second, 200 declared)",
                raw_socket(head, [b"{"] + [b" "] * 60, 1.0), says=("body",),
                within_s=BODY_TIMEOUT_S + 3),
        Request("a client that declares a body and never sends it", raw_socket(head, [b""] * 30, 1.0),
                says=("body",), within_s=BODY_TIMEOUT_S + 3),
        Request("Content-Length: -1", raw_socket(
            f"POST {chat} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n".encode(), [b""], 0.5),
                says=("Content-Length",)),
        *unhonoured_requests(chat, run, ok, user),
    ]


def _head(path: str, *headers: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


def unhonoured_requests(chat: str, run: str, ok: dict, user: list) -> list[Request]:
    """OpenAI fields the pipeline cannot honour (each refused naming the field, or accepted when its value asks
    for nothing), numbers that are not finite or not numbers, text that prints nothing, and bodies whose declared
    length the client never sends (each bounded in time: no answer in time is a hang)."""
    zero_width = "\u200b\u200c\u200d\u2060"
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    return [
        Request("tools: [a function]", post(chat, {**ok, "tools": [tool]}), says=("tools",)),
        Request("tools: [] (asks for nothing)", post(chat, {**ok, "tools": []}), right=answered),
        Request('tool_choice: "required"', post(chat, {**ok, "tools": [tool], "tool_choice": "required"}),
                says=("tool",)),
        Request("functions: [a function] (the legacy form)", post(chat, {**ok, "functions": [tool["function"]]}),
                says=("functions",)),
        Request('response_format: {"type": "json_object"}', post(chat, {**ok, "response_format":
                                                                        {"type": "json_object"}}),
                says=("response_format",)),
        Request('response_format: {"type": "text"} (asks for nothing)',
                post(chat, {**ok, "response_format": {"type": "text"}}), right=answered),
        Request("logprobs: true", post(chat, {**ok, "logprobs": True}), says=("logprobs",)),
        Request("logprobs: false (asks for nothing)", post(chat, {**ok, "logprobs": False}), right=answered),
        Request("top_logprobs: 3", post(chat, {**ok, "logprobs": True, "top_logprobs": 3}), says=("logprobs",)),
        Request("n: 1 (asks for nothing)", post(chat, {**ok, "n": 1}), right=answered),
        Request("n: 0", post(chat, {**ok, "n": 0}), says=("n",)),
        Request("temperature: 0.7", post(chat, {**ok, "temperature": 0.7}), says=("temperature",)),
        Request('temperature: "hot"', post(chat, {**ok, "temperature": "hot"}), says=("temperature",)),
        Request("top_p: 0.5", post(chat, {**ok, "top_p": 0.5}), says=("top_p",)),
        Request("seed: 7", post(chat, {**ok, "seed": 7}), says=("seed",)),
        Request('stop: ["\\n"]', post(chat, {**ok, "stop": ["\n"]}), says=("stop",)),
        Request("max_tokens: true", post(chat, {**ok, "max_tokens": True}), says=("max_tokens",)),
        Request("max_tokens: 1e400 (infinity once parsed)",
                post(chat, raw=b'{"model": "closed_book", "messages": [{"role": "user", "content": "Hi"}], '
                               b'"max_tokens": 1e400}'), says=("1e400",)),
        Request("temperature: NaN (a JSON extension)",
                post(chat, raw=b'{"model": "closed_book", "messages": [{"role": "user", "content": "Hi"}], '
                               b'"temperature": NaN}'), says=("nan",)),
        Request("max_completion_tokens: -Infinity (a JSON extension)",
                post(chat, raw=b'{"model": "closed_book", "messages": [{"role": "user", "content": "Hi"}], '
                               b'"max_completion_tokens": -Infinity}'), says=("infinity",)),
        Request("model: null", post(chat, {**ok, "model": None}), says=("model",)),
        Request("a user message of zero-width characters", post(chat, {**ok, "messages": [
            {"role": "user", "content": zero_width}]}), says=("content",)),
        Request("run: a query of zero-width characters", post(run, {"query": zero_width}), says=("query",)),
        Request("run: query NaN (a JSON extension)", post(run, raw=b'{"query": NaN}'), says=("NaN",)),
        Request("a body that is not UTF-8", post(chat, raw=b'{"model": "closed_book", "messages": [{"role": '
                                                         b'"user", "content": "caf\xe9"}]}'), says=("utf-8",)),
        Request("the body null", post(chat, raw=b"null"), says=("object",)),
        Request("JSON nested 30,000 deep (within the body limit)", post(chat, raw=b"[" * 30_000 + b"]" * 30_000),
                says=("json",)),
        Request("Content-Length: 10,000,000 declared, 1 byte sent",
                raw_socket(_head(chat, "Content-Length: 10000000"), [b"{"] + [b""] * 20, 1.0),
                says=("65536",), within_s=BODY_TIMEOUT_S + 3),
        Request("Content-Length: 70,000 declared, the body never sent",
                raw_socket(_head(chat, "Content-Length: 70000"), [b""] * 20, 1.0),
                says=("65536",), within_s=BODY_TIMEOUT_S + 3),
        Request("Content-Length: ten", raw_socket(_head(chat, "Content-Length: ten"), [b""], 0.5),
                says=("Content-Length",), within_s=BODY_TIMEOUT_S + 3),
        Request("a chunked body of 70,000 bytes (limit 65,536)",
                raw_socket(_head(chat, "Transfer-Encoding: chunked"),
                           [b"%x\r\n" % 10_000 + b" " * 10_000 + b"\r\n"] * 7 + [b"0\r\n\r\n"], 0.3),
                says=("65536",), within_s=BODY_TIMEOUT_S + 10),
        Request("PUT on the chat route", post(chat, ok, method="PUT"), says=("PUT",)),
    ]


def start_server(port: int, log) -> subprocess.Popen:
    argv = [*ICR2, "serve", "closed_book", "--backend", llama_backend(), "--port", str(port), "--body-timeout",
            str(BODY_TIMEOUT_S), "--request-timeout", str(REQUEST_TIMEOUT_S), "--max-new-tokens", "8",
            "--max-query-chars", str(MAX_QUERY_CHARS)]
    return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def classify_answer(request: Request, status: int, body: Any, seconds: float, server_log: str) -> tuple[str, str]:
    if "Traceback" in server_log:
        return "traceback", "a traceback in the server's log"
    if status >= 500:
        return "traceback", f"HTTP {status}"
    if request.within_s is not None and seconds > request.within_s:
        return "hang", f"answered after {seconds:.1f} s (limit {request.within_s} s)"
    if status == 0 and ("timed out" in str(body).lower() or "timeout" in str(body)[:40].lower()):
        return "hang", f"no answer: {str(body)[:80]}"
    if 200 <= status < 300:
        if request.right is None:
            return "silent wrong result", f"HTTP {status} where an error was due"
        ok, observed = request.right(body)
        return ("right result" if ok else "silent wrong result"), observed
    if not 400 <= status < 500:
        return "unclear error", f"HTTP {status}"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        text = f"{error.get('message')} (param {error.get('param')!r}, code {error.get('code')!r})"
    elif isinstance(body, dict):
        text = json.dumps(body)
    else:
        text = str(body)
    missing = [w for w in request.says if w.lower() not in text.lower()]
    if missing or not request.says:
        return "unclear error", f"error lacks {missing}" if missing else "no words to check"
    return "clear error", f"answered in {seconds:.1f} s" if request.within_s else ""


def shown(status: int, body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        text = f"HTTP {status} {error.get('code')} (param {error.get('param')!r}): {error.get('message')}"
    elif 200 <= status < 300 and isinstance(body, dict) and "choices" in body:
        text = f"HTTP {status}: {body['choices'][0]['message']['content']!r}"
    else:
        text = f"HTTP {status}: {json.dumps(body) if not isinstance(body, str) else body}"
    return text if len(text) <= 400 else text[:397] + "..."


def run(tmp, only: list[str] | None = None, progress: Callable | None = None) -> list[dict[str, Any]]:
    """Start the server, send every request, stop the server; one record per request."""
    chosen = [r for r in requests() if only is None or r.what.startswith("(")
              or any(o.lower() in r.what.lower() for o in only)]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp / "serve.log"
    results = []
    with open(log_path, "w") as log:
        server = start_server(port, log)
        try:
            wait_until_answering(server, f"{url}/v1/models", log_path)
            for request in (progress(chosen) if progress else chosen):
                before = log_path.stat().st_size
                try:
                    status, body, seconds = request.send(url)
                except Exception as error:  # a client failure is an outcome too
                    status, body, seconds = 0, f"{type(error).__name__}: {error}", 0.0
                time.sleep(0.2)
                with open(log_path) as handle:
                    handle.seek(before)
                    server_log = handle.read()
                kind, observed = classify_answer(request, status, body, seconds, server_log)
                results.append({"surface": "HTTP", "input": request.what, "setup": request.what.startswith("("),
                                "exit": status, "class": kind, "observed": observed, "outcome": shown(status, body),
                                "seconds": round(seconds, 1)})
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    return results


if __name__ == "__main__":  # a quick look: python bench/bad_input_cases/http_cases.py [filter ...]
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        for r in run(Path(folder), sys.argv[1:] or None):
            print(f"[{r['class']}] {r['input']} -> {r['outcome'][:220]} {r['observed']}")
