"""API keys, per-key rate limits, the security guard and TLS of ``icr2 serve``, over real HTTP.

One real ``icr2 serve closed_book vanilla_rag`` subprocess (SmolLM2, 4 new tokens) with a key file and a key in an
environment variable: the official ``openai`` client with a right key gets answers from both pipelines, and 401
(``AuthenticationError``) with no key, a wrong key, or a key revoked by editing the file while the server runs; a
key's rate limit answers 429 with Retry-After; no key appears in the server's output or in any error. A second
server serves HTTPS with a certificate this test makes (openssl). The key file parser, the environment keys and
the rate limiter are checked directly too (unit)."""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from icr2_components.errors import UserInputError
from icr2_components.serving.auth import ApiKey, KeyStore, RateLimiter, hash_key, keys_from_env, parse_key_file

ROOT = Path(__file__).resolve().parents[1]
ICR2 = str(Path(sys.executable).parent / "icr2")
ALICE = "alice-key-7c1f0e9b2d4a4f8e"
BOB = "bob-key-5a6b7c8d9e0f1a2b3c"
LIMITED = "limited-key-0a1b2c3d4e5f6a7b"
ENV_KEY = "env-key-9f8e7d6c5b4a39281706"
KEYS = (ALICE, BOB, LIMITED, ENV_KEY)
QUESTION = "What is the capital of France?"
ORIGIN = "https://app.example.org"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_keys(path: Path, lines: list[str]) -> None:
    """Replace the key file in one step (as the docs ask): a reader never sees it half written."""
    staged = path.with_suffix(".new")
    staged.write_text("\n".join(lines) + "\n")
    os.replace(staged, path)


def wait_ready(url: str, process: subprocess.Popen, key: str | None, timeout: float = 300, **client) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"icr2 serve exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health/ready", headers=headers, timeout=2, **client).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} not ready in {timeout} s")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    key_file = folder / "keys.txt"
    write_keys(key_file, ["# accepted keys: sha256, name, limit",
                          f"{hash_key(ALICE)}  alice", f"{hash_key(BOB)}  bob  600/min",
                          f"{hash_key(LIMITED)}  limited  2/min"])
    log = folder / "serve.log"
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "ICR2_TEST_KEYS": ENV_KEY}
    with open(log, "w") as output:
        process = subprocess.Popen(
            [ICR2, "serve", "closed_book", "vanilla_rag", "--port", str(port), "--max-new-tokens", "4",
             "--api-keys-file", str(key_file), "--api-keys-env", "ICR2_TEST_KEYS", "--cors-origin", ORIGIN],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, ALICE)
        yield {"url": url, "key_file": key_file, "log": log, "process": process}
    finally:
        stop(process)
        text = log.read_text()
        for key in KEYS:  # never logged, whatever happened
            assert key not in text, "an API key appears in the server's output"


def client(url: str, key: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


def test_the_right_key_gets_answers_from_both_pipelines(keyed_server):
    url = keyed_server["url"]
    for key in (ALICE, ENV_KEY):  # from the file and from the environment variable
        models = client(url, key).models.list()
        assert [model.id for model in models] == ["closed_book", "vanilla_rag"]
        for model in ("closed_book", "vanilla_rag"):
            completion = client(url, key).chat.completions.create(
                model=model, messages=[{"role": "user", "content": QUESTION}])
            assert completion.model == model and completion.choices[0].message.content.strip()
    answered = httpx.post(f"{url}/vanilla_rag/run", json={"query": QUESTION}, timeout=300,
                          headers={"Authorization": f"Bearer {ALICE}"})
    assert answered.status_code == 200 and answered.json()["result"]["documents"], answered.text
    assert answered.headers["x-request-id"]


@pytest.mark.parametrize("key", [None, "not-a-key-of-this-server-1234", f"{ALICE}x", ALICE[:-1]],
                         ids=["no key", "wrong key", "key plus a character", "key minus a character"])
def test_no_key_or_a_wrong_key_is_401_on_every_route_but_liveness(keyed_server, key):
    url = keyed_server["url"]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if key is None:
        with pytest.raises(openai.AuthenticationError) as raised:  # the client made to send no Authorization
            client(url, "unused").models.list(extra_headers={"Authorization": openai.Omit()})
        assert raised.value.status_code == 401 and raised.value.body["code"] == "invalid_api_key"
    else:
        with pytest.raises(openai.AuthenticationError) as raised:
            client(url, key).chat.completions.create(model="closed_book",
                                                     messages=[{"role": "user", "content": QUESTION}])
        assert raised.value.body["code"] == "invalid_api_key"
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/closed_book/run"),
                         ("GET", "/status"), ("GET", "/openapi.json"), ("GET", "/health/ready"),
                         ("GET", "/no/such/path"), ("GET", "/models")):
        response = httpx.request(method, url + path, headers=headers, json={"query": QUESTION}, timeout=30)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "invalid_api_key" and response.headers["www-authenticate"]
        assert key is None or key not in response.text
    assert httpx.get(f"{url}/health/live", headers=headers, timeout=30).json() == {"status": "live"}


def test_a_key_revoked_in_the_file_is_refused_without_a_restart(keyed_server):
    url, key_file = keyed_server["url"], keyed_server["key_file"]
    assert client(url, BOB).models.list().data
    before = key_file.read_text().splitlines()
    write_keys(key_file, [line for line in before if "bob" not in line])
    try:
        with pytest.raises(openai.AuthenticationError):
            client(url, BOB).models.list()
        assert client(url, ALICE).models.list().data  # the others still work
    finally:
        write_keys(key_file, before)
    assert client(url, BOB).models.list().data  # listed again: accepted again


def test_a_key_over_its_rate_limit_gets_429_with_retry_after(keyed_server):
    url = keyed_server["url"]
    headers = {"Authorization": f"Bearer {LIMITED}"}
    statuses = [httpx.get(f"{url}/v1/models", headers=headers, timeout=30) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    refused = statuses[-1]
    assert refused.json()["error"]["code"] == "rate_limited" and int(refused.headers["retry-after"]) >= 1
    assert LIMITED not in refused.text
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30).status_code == 200


def test_a_key_in_the_query_string_is_refused_and_not_echoed(keyed_server):
    url = keyed_server["url"]
    for parameter in ("api_key", "key", "access_token"):
        response = httpx.get(f"{url}/v1/models", params={parameter: ALICE}, timeout=30,
                             headers={"Authorization": f"Bearer {ALICE}"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "credentials_in_query"
        assert ALICE not in response.text


def test_a_request_id_is_echoed_and_an_injected_one_refused(keyed_server):
    url = keyed_server["url"]
    headers = {"Authorization": f"Bearer {ALICE}"}
    given = httpx.get(f"{url}/status", headers={**headers, "X-Request-ID": "abc-123"}, timeout=30)
    assert given.status_code == 200 and given.headers["x-request-id"] == "abc-123"
    for bad in ("abc def", "x" * 129, "id\u00e9", "a;b=c"):
        response = httpx.get(f"{url}/status", headers={**headers, "X-Request-ID": bad.encode("utf-8")}, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request_id", bad


def test_browser_origins_not_listed_are_403_and_a_listed_one_is_allowed(keyed_server):
    url = keyed_server["url"]
    headers = {"Authorization": f"Bearer {ALICE}"}
    for origin in ("https://evil.example", "null", ORIGIN + ".evil.example", "http://app.example.org"):
        response = httpx.get(f"{url}/v1/models", headers={**headers, "Origin": origin}, timeout=30)
        assert response.status_code == 403 and response.json()["error"]["code"] == "origin_not_allowed", origin
    preflight = httpx.options(f"{url}/v1/chat/completions", timeout=30, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    listed = httpx.get(f"{url}/v1/models", headers={**headers, "Origin": ORIGIN}, timeout=30)
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == ORIGIN


def raw_status(url: str, request: str) -> tuple[int, str]:
    """The status and body of a request sent as it is on a socket (no client tidies its headers)."""
    port = int(url.rsplit(":", 1)[1])
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request.encode("latin-1"))
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode(errors="replace")


def test_repeated_and_oversized_headers_are_refused(keyed_server):
    url = keyed_server["url"]
    start = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    twice = start + f"Authorization: Bearer {ALICE}\r\nAuthorization: Bearer wrong-key-0000000000\r\n\r\n"
    status, body = raw_status(url, twice)
    assert status == 400 and "more than one authorization" in body and ALICE not in body
    padded = start + f"Authorization: Bearer {ALICE}\r\n" + "".join(f"X-Pad-{i}: {'p' * 90}\r\n"
                                                                     for i in range(200)) + "\r\n"
    status, body = raw_status(url, padded)
    assert status == 431 and "request_header_fields_too_large" in body


def test_a_broken_key_file_refuses_everyone_until_fixed(keyed_server):
    url, key_file = keyed_server["url"], keyed_server["key_file"]
    before = key_file.read_text().splitlines()
    write_keys(key_file, [ALICE])  # a key pasted instead of its hash: the file no longer parses
    try:
        response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)
        assert response.status_code == 503 and response.json()["error"]["code"] == "api_keys_unavailable"
        assert ALICE not in response.text
    finally:
        write_keys(key_file, before)
    assert client(url, ALICE).models.list().data


def make_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_with_a_certificate_the_test_makes(tmp_path):
    cert, key = make_certificate(tmp_path)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "ICR2_TLS_KEY": ALICE}
    process = subprocess.Popen([ICR2, "serve", "closed_book", "--port", str(port), "--max-new-tokens", "4",
                                "--tls-cert", str(cert), "--tls-key", str(key), "--api-keys-env", "ICR2_TLS_KEY"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=str(cert))
    try:
        wait_ready(url, process, ALICE, verify=trusted)
        answer = OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0, timeout=300,
                        http_client=httpx.Client(verify=trusted)).chat.completions.create(
            model="closed_book", messages=[{"role": "user", "content": QUESTION}])
        assert answer.choices[0].message.content.strip()
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate
            httpx.get(f"{url}/health/live", timeout=10)
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port gets no HTTP answer
            httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=10).raise_for_status()
    finally:
        stop(process)
        output = process.stdout.read()
    assert process.returncode == 0, output[-2000:]
    assert f"https://127.0.0.1:{port}" in output and ALICE not in output


@pytest.mark.parametrize("argv, words", [
    (["--host", "0.0.0.0"], ["not loopback", "--no-auth"]),
    (["--host", "0.0.0.0", "--api-keys-env", "ICR2_UNSET_VARIABLE_FOR_TEST"], ["ICR2_UNSET_VARIABLE_FOR_TEST",
                                                                              "unset"]),
    (["--api-keys-env", "ICR2_TEST_KEYS", "--no-auth"], ["contradict"]),
    (["--tls-cert", "cert.pem"], ["--tls-key"]),
    (["--api-keys-file", "no/such/keys.txt"], ["no/such/keys.txt", "cannot read"]),
])
def test_unsafe_or_incomplete_settings_are_one_line_before_loading(argv, words):
    env = {**os.environ, "ICR2_TEST_KEYS": ENV_KEY}
    env.pop("ICR2_UNSET_VARIABLE_FOR_TEST", None)
    result = subprocess.run([ICR2, "serve", "closed_book", "--port", str(free_port()), *argv], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icr2 serve: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines
    assert ENV_KEY not in result.stderr


@pytest.mark.unit
def test_the_key_file_parser_names_the_line_and_never_repeats_it(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# comment\n\n{hash_key(ALICE)} alice 5/s\n{hash_key(BOB).upper()}\n")
    keys = parse_key_file(path)
    assert keys == [ApiKey(hash_key(ALICE), "alice", 5, 1.0), ApiKey(hash_key(BOB), "key-4", None, 60.0)]
    refused = ((f"{ALICE}\n", ":1:"), (f"{hash_key(ALICE)}\n{hash_key(ALICE)}\n", ":2:"),
               (f"{hash_key(ALICE)} a b\n", ":1:"), (f"{hash_key(ALICE)} 0/min\n", ":1:"), ("# none\n", "no key"))
    for text, words in refused:
        path.write_text(text)
        with pytest.raises(UserInputError) as raised:
            parse_key_file(path)
        assert words in str(raised.value) and ALICE not in str(raised.value), str(raised.value)


@pytest.mark.unit
def test_environment_keys_are_hashed_and_short_ones_refused_without_showing_them():
    keys = keys_from_env("K", {"K": f"{ALICE}, {BOB}"})
    assert [key.sha256 for key in keys] == [hash_key(ALICE), hash_key(BOB)]
    with pytest.raises(UserInputError) as raised:
        keys_from_env("K", {"K": f"{ALICE},zq7x"})
    assert "key 2" in str(raised.value) and "zq7x" not in str(raised.value)
    with pytest.raises(UserInputError):
        keys_from_env("K", {})


@pytest.mark.unit
def test_the_key_store_reads_the_file_again_when_it_changes(tmp_path):
    path = tmp_path / "keys"
    write_keys(path, [hash_key(ALICE), hash_key(BOB)])
    store = KeyStore(path)
    assert store.match(ALICE).sha256 == hash_key(ALICE) and store.match("nope") is None
    write_keys(path, [hash_key(BOB)])
    assert store.match(ALICE) is None and store.match(BOB) is not None


@pytest.mark.unit
def test_the_rate_limiter_allows_the_burst_then_one_per_interval():
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    key = ApiKey(hash_key(ALICE), "alice", 2, 60.0)
    assert [limiter.admit(key) for _ in range(2)] == [0.0, 0.0]
    assert limiter.admit(key) == pytest.approx(30.0)
    now[0] = 30.0
    assert limiter.admit(key) == 0.0
    assert limiter.admit(ApiKey(hash_key(BOB), "bob")) == 0.0  # no limit
