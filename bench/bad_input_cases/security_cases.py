"""Security cases against the real ``icr2 serve`` with API keys: one server (``closed_book`` and ``vanilla_rag``,
SmolLM2 in-process, 4 new tokens) on a free loopback port with a key file, a rate-limited key and one allowed
browser origin, and the requests an attacker or a careless client sends: no key, wrong keys, a revoked key, keys in
the query string, other schemes, repeated and oversized headers, request ids carrying injections, pipelines that are
not served, path tricks, browser origins not listed, a key over its rate limit.

Each case names the status the server documents for it (``serving/security.py``'s ``SECURITY_ERRORS``, the 404 of a
path not served, ``openai_routes``' ``model_not_found``). It is a clear error when the answer has exactly that status
and its error names the words the case lists; a 5xx or a traceback in the server's output is a traceback; another
status an unclear error; a 2xx where an error was due a silent wrong result; and any answer or log line holding a
key is data loss (a key must never be echoed or logged).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bad_input_cases.common import ICR2, REPO, wait_until_answering

GOOD = "good-key-3f9a1c7e5b2d4f6a8c0e"
OTHER = "other-key-8e6c4a2f0d9b7c5a3e1f"
LIMITED = "limited-key-1a3c5e7f9b2d4f6a8c0e"
REVOKED = "revoked-key-0f2e4d6c8b1a3c5e7d9f"
KEYS = (GOOD, OTHER, LIMITED, REVOKED)
ORIGIN = "https://app.example.org"
TIMEOUT_S = 120
Answer = tuple[int, dict[str, str], Any, float]  # status, headers (lower-case names), parsed body, seconds


@dataclass
class Case:
    """One request (or a few, the last judged): ``send(url, key_file)`` returns its answer; ``status`` is the
    documented one; ``says`` are words the error must hold; ``right`` checks a 2xx (None: an error was due)."""

    what: str
    send: Callable[[str, Path], Answer]
    status: int
    says: tuple[str, ...] = ()
    right: Callable[[dict[str, str], Any], tuple[bool, str]] | None = None
    headers_hold: tuple[str, ...] = ()  # response headers the answer must carry


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def raw(request: bytes) -> Callable[[str, Path], Answer]:
    """Send ``request`` as it is on a plain socket (``Connection: close``) and read the whole answer."""

    def send(url: str, _key_file: Path) -> Answer:
        port = int(url.rsplit(":", 1)[1])
        start = time.perf_counter()
        received = b""
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as conn:
            conn.sendall(request)
            try:
                while chunk := conn.recv(65536):
                    received += chunk
            except OSError:
                pass
        seconds = time.perf_counter() - start
        if not received.startswith(b"HTTP/"):
            return 0, {}, received.decode(errors="replace")[:200], seconds
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = body.decode(errors="replace")
        return int(lines[0].split(" ", 2)[1]), headers, parsed, seconds

    return send


def head(method: str, target: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def http(method: str, path: str, key: str | None = GOOD, body: Any = None, headers: dict | None = None,
         params: dict | None = None, before: Callable[[Path], None] | None = None,
         repeat: int = 1) -> Callable[[str, Path], Answer]:
    """An httpx request (``repeat`` times, the last judged) with ``Authorization: Bearer key`` unless key is None."""
    import httpx

    def send(url: str, key_file: Path) -> Answer:
        if before is not None:
            before(key_file)
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        start = time.perf_counter()
        for _ in range(repeat):
            response = httpx.request(method, url + path, json=body, headers=sent, params=params, timeout=TIMEOUT_S)
        seconds = time.perf_counter() - start
        try:
            parsed = response.json()
        except ValueError:
            parsed = response.text
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, parsed, seconds

    return send


def revoke(key: str) -> Callable[[Path], None]:
    """Delete ``key``'s line from the key file (replaced in one step), as an operator revoking it does."""

    def edit(key_file: Path) -> None:
        lines = [line for line in key_file.read_text().splitlines() if _sha(key) not in line]
        staged = key_file.with_suffix(".new")
        staged.write_text("\n".join(lines) + "\n")
        os.replace(staged, key_file)
        time.sleep(0.05)

    return edit


def answered(_headers: dict[str, str], body: Any) -> tuple[bool, str]:
    try:
        text = body["choices"][0]["message"]["content"] if "choices" in body else body["result"]["replies"][0]
    except (KeyError, IndexError, TypeError):
        return False, f"not an answer: {str(body)[:120]}"
    return bool(str(text).strip()), f"answered {str(text)[:40]!r}"


def echoed_id(expected: str) -> Callable[[dict[str, str], Any], tuple[bool, str]]:
    def check(headers: dict[str, str], _body: Any) -> tuple[bool, str]:
        got = headers.get("x-request-id")
        return got == expected and "set-cookie" not in headers, f"x-request-id {got!r}; set-cookie " \
            f"{headers.get('set-cookie')!r}"

    return check


def allowed_origin(headers: dict[str, str], _body: Any) -> tuple[bool, str]:
    got = headers.get("access-control-allow-origin")
    return got == ORIGIN, f"access-control-allow-origin {got!r}"


def cases() -> list[Case]:
    chat = "/v1/chat/completions"
    ask = {"model": "closed_book", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    run_body = json.dumps({"query": "Who wrote Hamlet?"}).encode()
    bearer = f"Authorization: Bearer {GOOD}"
    no_key = ("API key",)
    return [
        Case("(a good chat completion with the right key)", http("POST", chat, body=ask), 200, right=answered),
        Case("(a good vanilla_rag run with the right key)", http("POST", "/vanilla_rag/run",
                                                                 body={"query": "Who wrote Hamlet?"}), 200,
             right=answered),
        # no key, wrong keys, other schemes
        Case("no Authorization header: chat", http("POST", chat, key=None, body=ask), 401, no_key,
             headers_hold=("www-authenticate",)),
        Case("no Authorization header: GET /v1/models", http("GET", "/v1/models", key=None), 401, no_key),
        Case("no Authorization header: POST /closed_book/run", http("POST", "/closed_book/run", key=None,
                                                                    body={"query": "Hi"}), 401, no_key),
        Case("no Authorization header: GET /status", http("GET", "/status", key=None), 401, no_key),
        Case("no Authorization header: GET /openapi.json", http("GET", "/openapi.json", key=None), 401, no_key),
        Case("no Authorization header: GET /health/ready", http("GET", "/health/ready", key=None), 401, no_key),
        Case("no Authorization header: a path that is not served", http("GET", "/admin", key=None), 401, no_key),
        Case("a wrong key", http("POST", chat, key="not-a-key-of-this-server-0000", body=ask), 401,
             ("not accepted",)),
        Case("the right key plus one character", http("GET", "/v1/models", key=GOOD + "x"), 401, ("not accepted",)),
        Case("the right key less its last character", http("GET", "/v1/models", key=GOOD[:-1]), 401,
             ("not accepted",)),
        Case("the key's SHA-256 (what the file holds) sent as the key", http("GET", "/v1/models", key=_sha(GOOD)),
             401, ("not accepted",)),
        Case("the right key in another case", http("GET", "/v1/models", key=GOOD.upper()), 401, ("not accepted",)),
        Case("Authorization: Basic with the key", http("GET", "/v1/models", key=None,
                                                       headers={"Authorization": f"Basic {GOOD}"}), 401, ("Bearer",)),
        Case("Authorization: Bearer with no token", http("GET", "/v1/models", key=None,
                                                         headers={"Authorization": "Bearer"}), 401, ("Bearer",)),
        Case("Authorization: the key without 'Bearer'", http("GET", "/v1/models", key=None,
                                                            headers={"Authorization": GOOD}), 401, ("Bearer",)),
        Case("a key revoked in the key file while the server runs", http("POST", chat, key=REVOKED, body=ask,
                                                                         before=revoke(REVOKED)), 401,
             ("not accepted",)),
        # keys in the query string
        Case("?api_key=KEY and no header", http("GET", "/v1/models", key=None, params={"api_key": GOOD}), 400,
             ("api_key", "Authorization")),
        Case("?key=KEY beside the right header", http("GET", "/v1/models", params={"key": GOOD}), 400, ("key",)),
        Case("?access_token=KEY on the chat route", http("POST", chat, key=None, body=ask,
                                                          params={"access_token": GOOD}), 400, ("access_token",)),
        Case("?token=KEY on the run route", http("POST", "/closed_book/run", body={"query": "Hi"},
                                                  params={"token": GOOD}), 400, ("token",)),
        Case("?API_KEY=KEY (upper case)", http("GET", "/status", params={"API_KEY": GOOD}), 400, ("API_KEY",)),
        # repeated and oversized headers
        Case("two Authorization headers (right, wrong)", raw(head("GET", "/v1/models", bearer,
                                                                  "Authorization: Bearer wrong-key-000000000000")),
             400, ("more than one", "authorization")),
        Case("two Authorization headers (both right)", raw(head("GET", "/v1/models", bearer, bearer)), 400,
             ("more than one",)),
        Case("a 20,000-byte Authorization header", http("GET", "/v1/models", key="k" * 20_000), 431, ("16384",)),
        Case("200 extra headers of 100 bytes", raw(head("GET", "/status", bearer,
                                                        *[f"X-Pad-{i}: {'p' * 90}" for i in range(200)])),
             431, ("16384",)),
        Case("two Origin headers", raw(head("GET", "/status", bearer, f"Origin: {ORIGIN}",
                                            "Origin: https://evil.example")), 400, ("more than one", "origin")),
        # request ids
        Case("X-Request-ID with an encoded CRLF and a Set-Cookie", http("GET", "/status", headers={
            "X-Request-ID": "abc%0d%0aSet-Cookie:%20evil=1"}), 400, ("X-Request-ID",)),
        Case("X-Request-ID: a header line split in two (CRLF sent raw)",
             raw(head("GET", "/status", bearer, "X-Request-ID: abc", "Set-Cookie: evil=1")), 200,
             right=echoed_id("abc")),
        Case("X-Request-ID with a space", http("GET", "/status", headers={"X-Request-ID": "abc def"}), 400,
             ("X-Request-ID",)),
        Case("X-Request-ID of 129 characters", http("GET", "/status", headers={"X-Request-ID": "a" * 129}), 400,
             ("128",)),
        Case("X-Request-ID with a control character (raw)", raw(head("GET", "/status", bearer,
                                                                     "X-Request-ID: ab\x01cd")), 400, ()),
        Case("X-Request-ID of UTF-8 letters", http("GET", "/status", headers={"X-Request-ID": "caf\u00e9".encode()}),
             400, ("X-Request-ID",)),
        Case("X-Request-ID with a log-forging quote and brace", http("GET", "/status", headers={
            "X-Request-ID": 'x" "status": 200 {'}), 400, ("X-Request-ID",)),
        Case("two X-Request-ID headers", raw(head("GET", "/status", bearer, "X-Request-ID: a", "X-Request-ID: b")),
             400, ("more than one", "x-request-id")),
        # pipelines that are not served
        Case('model: "rap" (a shipped pipeline this server does not serve)',
             http("POST", chat, body={**ask, "model": "rap"}), 404, ("rap", "closed_book")),
        Case('model: "../closed_book"', http("POST", chat, body={**ask, "model": "../closed_book"}), 404,
             ("../closed_book",)),
        Case("POST /rap/run (not served)", http("POST", "/rap/run", body={"query": "Hi"}), 404, ("/rap/run",)),
        Case("POST /adaptive_rag/run (not served)", http("POST", "/adaptive_rag/run", body={"query": "Hi"}), 404,
             ("not served",)),
        # path tricks (raw, so that no client normalises them)
        Case("GET /v1/../status", raw(head("GET", "/v1/../status", bearer)), 404, ("not served",)),
        Case("GET /%2e%2e/status", raw(head("GET", "/%2e%2e/status", bearer)), 404, ("not served",)),
        Case("GET //status", raw(head("GET", "//status", bearer)), 404, ("not served",)),
        Case("GET /./status", raw(head("GET", "/./status", bearer)), 404, ("not served",)),
        Case("GET /STATUS", raw(head("GET", "/STATUS", bearer)), 404, ("not served",)),
        Case("POST /closed_book/run/ (a trailing slash)", raw(head("POST", "/closed_book/run/", bearer,
                                                                   body=run_body)), 404, ("not served",)),
        Case("POST /closed_book/run;x=1", raw(head("POST", "/closed_book/run;x=1", bearer, body=run_body)), 404,
             ("not served",)),
        Case("POST /v1/chat/completions/../../closed_book/run",
             raw(head("POST", "/v1/chat/completions/../../closed_book/run", bearer, body=run_body)), 404,
             ("not served",)),
        Case("GET /health/live/../ready (liveness needs no key; readiness does)",
             raw(head("GET", "/health/live/../ready")), 401, no_key),
        Case("GET /status%00", raw(head("GET", "/status%00", bearer)), 404, ("not served",)),
        # browser origins
        Case("Origin: https://evil.example on the chat route", http("POST", chat, body=ask, headers={
            "Origin": "https://evil.example"}), 403, ("Origin",)),
        Case("a preflight from https://evil.example", http("OPTIONS", chat, key=None, headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}), 403, ("Origin",)),
        Case("Origin: null", http("GET", "/v1/models", headers={"Origin": "null"}), 403, ("Origin",)),
        Case("an Origin that extends the allowed one (https://app.example.org.evil.example)",
             http("GET", "/v1/models", headers={"Origin": ORIGIN + ".evil.example"}), 403, ("Origin",)),
        Case("the allowed Origin over plain http", http("GET", "/v1/models", headers={
            "Origin": ORIGIN.replace("https", "http")}), 403, ("Origin",)),
        Case("(a preflight from the allowed origin)", http("OPTIONS", chat, key=None, headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"}), 204, right=allowed_origin),
        Case("the allowed origin without a key", http("GET", "/v1/models", key=None, headers={"Origin": ORIGIN}), 401,
             no_key),
        # rate limit per key
        Case("a key over its rate limit (2/min; the third request)", http("GET", "/v1/models", key=LIMITED,
                                                                          repeat=3), 429, ("rate limit",),
             headers_hold=("retry-after",)),
        Case("(another key while that one is limited)", http("GET", "/v1/models", key=OTHER), 200,
             right=lambda headers, body: (isinstance(body, dict) and len(body.get("data", [])) == 2,
                                          f"{len(body.get('data', [])) if isinstance(body, dict) else body} models")),
    ]


def start_server(port: int, key_file: Path, log) -> subprocess.Popen:
    argv = [*ICR2, "serve", "closed_book", "vanilla_rag", "--port", str(port), "--max-new-tokens", "4",
            "--api-keys-file", str(key_file), "--cors-origin", ORIGIN]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)


def classify(case: Case, status: int, headers: dict[str, str], body: Any, server_log: str) -> tuple[str, str]:
    text = json.dumps(body) if not isinstance(body, str) else body
    leaked = [key for key in KEYS if key in text or key in server_log or any(key in v for v in headers.values())]
    if leaked:
        return "data loss", "an API key is echoed in the answer or the server's output"
    if "Traceback" in server_log:
        return "traceback", "a traceback in the server's output"
    if status >= 500:
        return "traceback", f"HTTP {status}"
    if status == 0:
        return "hang" if "timed out" in text.lower() else "unclear error", f"no HTTP answer: {text[:80]}"
    missing_headers = [name for name in case.headers_hold if name not in headers]
    if 200 <= status < 300:
        if case.right is None:
            return "silent wrong result", f"HTTP {status} where {case.status} is documented"
        ok, observed = case.right(headers, body)
        return ("right result" if ok and status == case.status else "silent wrong result"), observed
    if status != case.status:
        return "unclear error", f"HTTP {status} where {case.status} is documented"
    error = body.get("error") if isinstance(body, dict) else None
    message = (f"{error.get('message')} (param {error.get('param')!r}, code {error.get('code')!r})"
               if isinstance(error, dict) else text)
    missing = [word for word in case.says if word.lower() not in message.lower()]
    if missing or missing_headers:
        return "unclear error", f"error lacks {missing} / headers {missing_headers}"
    return "clear error", ""


def shown(status: int, body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        text = f"HTTP {status} {error.get('code')}: {error.get('message')}"
    elif isinstance(body, dict) and "reason" in body:
        text = f"HTTP {status} {body.get('error')}: {body.get('reason')}"
    else:
        text = f"HTTP {status}: {json.dumps(body) if not isinstance(body, str) else body}"
    return text if len(text) <= 300 else text[:297] + "..."


def run(tmp: Path, only: list[str] | None = None, progress: Callable | None = None) -> list[dict[str, Any]]:
    """Start the keyed server, send every case, stop the server; one record per case (surface ``HTTP``)."""
    chosen = [c for c in cases() if only is None or c.what.startswith("(")
              or any(o.lower() in c.what.lower() for o in only)]
    key_file = tmp / "keys.txt"
    key_file.write_text(f"{_sha(GOOD)}  good\n{_sha(OTHER)}  other\n{_sha(LIMITED)}  limited  2/min\n"
                        f"{_sha(REVOKED)}  revoked\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp / "serve-keys.log"
    results = []
    with open(log_path, "w") as log:
        server = start_server(port, key_file, log)
        try:
            wait_until_answering(server, f"{url}/health/ready", log_path, headers={"Authorization": f"Bearer {GOOD}"})
            for case in (progress(chosen) if progress else chosen):
                before = log_path.stat().st_size
                try:
                    status, headers, body, seconds = case.send(url, key_file)
                except Exception as error:  # a client failure is an outcome too
                    status, headers, body, seconds = 0, {}, f"{type(error).__name__}: {error}", 0.0
                time.sleep(0.1)
                with open(log_path) as handle:
                    handle.seek(before)
                    server_log = handle.read()
                kind, observed = classify(case, status, headers, body, server_log)
                results.append({"surface": "HTTP", "input": f"security: {case.what}",
                                "setup": case.what.startswith("("),
                                "exit": status, "class": kind, "observed": observed or f"documented {case.status}",
                                "outcome": shown(status, body), "seconds": round(seconds, 1)})
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    return results


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":  # these cases alone: python bench/bad_input_cases/security_cases.py [filter ...]
    import sys
    import tempfile
    from collections import Counter

    with tempfile.TemporaryDirectory() as folder:
        records = run(Path(folder), sys.argv[1:] or None)
    for r in records:
        print(f"[{r['class']}] {r['input']} -> {r['outcome'][:200]} {r['observed']}")
    counted = [r for r in records if not r["setup"]]
    totals = Counter(r["class"] for r in counted)
    line = f"{len(counted)} security cases (+ {len(records) - len(counted)} setup steps): " + ", ".join(
        f"{n} {kind}" for kind, n in totals.most_common())
    print(line)
    if not sys.argv[1:]:  # the whole set: kept beside bad_inputs.json until the next full bench/bad_inputs.py run
        out = REPO / "bench" / "results" / "bad_inputs_security.json"
        out.write_text(json.dumps({"totals": dict(totals), "summary": line, "cases": records}, indent=2) + "\n")
        print(f"wrote {out}")
