"""The life cycle of a real ``icr2 serve closed_book`` subprocess (SmolLM2 on the CPU): live at once, ready only
once the pipeline is loaded, and a real SIGTERM (``os.kill``) with four requests in flight (three answers and one
streamed) lets each finish with 200 while new connections are refused, then the process exits 0."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Name three colours and three animals."


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server():
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "icr2"), "serve", "closed_book", "--port", str(port),
         "--max-new-tokens", "24", "--grace-seconds", "240", "--concurrency", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_lets_four_requests_in_flight_finish_and_exits_0(server):
    process, url = server
    seen_loading = False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()[-2000:]
        try:
            live = httpx.get(f"{url}/health/live", timeout=2)
            ready = httpx.get(f"{url}/health/ready", timeout=2)
        except httpx.TransportError:
            time.sleep(0.05)
            continue
        assert live.status_code == 200
        if ready.status_code == 503:
            assert ready.json()["status"] == "loading" and ready.headers["retry-after"]
            seen_loading = True
        elif ready.status_code == 200:
            assert ready.json() == {"status": "ready", "pipelines": ["closed_book"], "loaded": ["closed_book"]}
            break
        time.sleep(0.05)
    else:
        raise AssertionError("not ready in 300 s")
    assert seen_loading, "the server answered before loading, and /health/ready never said loading"

    results: dict[str, tuple[int, str]] = {}
    first_token = threading.Event()

    def streamed() -> None:
        body = {"model": "closed_book", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as response:
            text = ""
            for line in response.iter_lines():
                if line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line:
                    first_token.set()
                text += line + "\n"
            results["stream"] = (response.status_code, text)

    def answered(name: str, path: str, body: dict) -> None:
        response = httpx.post(url + path, json=body, timeout=600)
        results[name] = (response.status_code, response.text)

    threads = [threading.Thread(target=streamed)]
    threads[0].start()
    assert first_token.wait(300), "the stream never started"
    chat = {"model": "closed_book", "messages": [{"role": "user", "content": QUESTION}]}
    threads += [threading.Thread(target=answered, args=("chat 1", "/v1/chat/completions", chat)),
                threading.Thread(target=answered, args=("chat 2", "/v1/chat/completions", chat)),
                threading.Thread(target=answered, args=("run", "/closed_book/run", {"query": QUESTION}))]
    for thread in threads[1:]:
        thread.start()
    time.sleep(1.0)  # the three are admitted (waiting for the one run slot) before the signal
    assert not results, f"answered before the signal: {sorted(results)}; the requests were not in flight"
    os.kill(process.pid, signal.SIGTERM)
    time.sleep(1.0)
    with pytest.raises(httpx.TransportError):  # draining: no new connection is accepted
        httpx.get(f"{url}/health/live", timeout=5)
    for thread in threads:
        thread.join(timeout=600)
    assert process.wait(timeout=300) == 0, process.stderr.read()[-2000:]
    assert sorted(results) == ["chat 1", "chat 2", "run", "stream"]
    assert all(status == 200 for status, _ in results.values()), results
    assert results["stream"][1].rstrip().endswith("data: [DONE]"), results["stream"][1][-300:]
    for name in ("chat 1", "chat 2"):
        assert json.loads(results[name][1])["choices"][0]["message"]["content"].strip()
    assert json.loads(results["run"][1])["result"]["replies"][0].strip()


def test_a_pipeline_that_fails_to_load_in_the_background_stops_the_server_with_its_error_line(tmp_path):
    """The server listens before it loads; a model that cannot load then ends it: exit 1, one error line."""
    broken = tmp_path / "missing_model.yaml"
    broken.write_text((ROOT / "pipelines" / "closed_book.yaml").read_text().replace(
        "model: smollm2-135m-instruct", "model: no-such-org/no-such-model"))
    result = subprocess.run([str(Path(sys.executable).parent / "icr2"), "serve", str(broken), "--port",
                             str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icr2 serve: error: "), result.stderr
    assert "'no-such-org/no-such-model'" in lines[0]
