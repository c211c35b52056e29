"""Pytest plugin: the real llama.cpp server for tests marked ``llama_server`` (never a mock).

Loaded by ``pytest_plugins = [..., "tests.llama_server_fixtures"]`` in tests/conftest.py.

``llama_server_url`` (session): the OpenAI-compatible API root, ``ICR2_LLAMA_URL`` or
``http://127.0.0.1:${ICR2_LLAMA_PORT:-8089}/v1``. When no server lists the model there
(``ICR2_LLAMA_MODEL_ALIAS``, default ``smollm2-135m-instruct``), the fixture runs
``bash scripts/llama_server.sh start`` itself (seconds when llama-cpp-python is installed; the first install
on a machine compiles llama.cpp, ~9 min on 2 cores) and stops the server at the end of the session,
only when it started it (``ICR2_LLAMA_KEEP=1`` leaves it running, e.g. when other test sessions share it). When
the server cannot be started the tests fail with the script's output; they are not skipped.

``llama_model_alias`` (session): the model name to send in requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from tests.stop_at_run_end import stop_now_or_at_run_end

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "llama_server.sh"
DEFAULT_ALIAS = "smollm2-135m-instruct"


def _default_url() -> str:
    return os.environ.get("ICR2_LLAMA_URL") or f"http://127.0.0.1:{os.environ.get('ICR2_LLAMA_PORT', '8089')}/v1"


def model_alias() -> str:
    return os.environ.get("ICR2_LLAMA_MODEL_ALIAS") or DEFAULT_ALIAS


def served_models(url: str, timeout: float = 3.0) -> list[str] | None:
    """The model ids ``GET <url>/models`` lists, or None when nothing (or no OpenAI-compatible server) answers."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=timeout) as response:
            body = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    return [entry.get("id") for entry in body["data"] if isinstance(entry, dict)]


def run_script(command: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``bash scripts/llama_server.sh <command>`` with this process's environment (plus ``env``), output captured."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(["bash", str(SCRIPT), command], check=False, cwd=REPO_ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def _keep() -> bool:
    return os.environ.get("ICR2_LLAMA_KEEP", "") in ("1", "true", "yes")


@pytest.fixture(scope="session")
def llama_model_alias() -> str:
    return model_alias()


@pytest.fixture(scope="session")
def llama_server_url():
    url = _default_url()
    alias = model_alias()
    started_here = False
    if alias not in (served_models(url) or []):
        if os.environ.get("ICR2_LLAMA_URL"):
            pytest.fail(f"No server lists '{alias}' at ICR2_LLAMA_URL={url}; start it, or unset ICR2_LLAMA_URL to let "
                        "the tests start a local one (bash scripts/llama_server.sh start).")
        try:
            # the first install on a machine compiles llama.cpp (~9 min on 2 cores)
            result = run_script("start", timeout=1800)
        except subprocess.TimeoutExpired as error:
            pytest.fail(f"`bash scripts/llama_server.sh start` did not finish in {error.timeout:.0f}s")
        if result.returncode != 0 or alias not in (served_models(url) or []):
            pytest.fail(
                f"No llama.cpp server at {url}, and `bash scripts/llama_server.sh start` failed "
                f"(exit {result.returncode}):\n"
                + (result.stdout + result.stderr)[-4000:]
            )
        started_here = True
    yield url
    if started_here and not _keep():
        stop_now_or_at_run_end(["bash", str(SCRIPT), "stop"], REPO_ROOT, dict(os.environ), timeout=120)


@pytest.fixture(scope="session")
def llama_cpp_backend(llama_server_url, tmp_path_factory) -> str:
    """What ``--backend`` takes for the llama.cpp server under test: the shipped ``llama_cpp_server`` when it points
    there, else a copy of its file pointed at ``llama_server_url``."""
    from icr2_components.backends import load_backend

    shipped_file = REPO_ROOT / "backends" / "llama_cpp_server.yaml"
    if load_backend(shipped_file).settings.served_model.api_base_url == llama_server_url:
        return "llama_cpp_server"
    file = tmp_path_factory.mktemp("backend") / "llama.yaml"
    file.write_text(shipped_file.read_text().replace("http://127.0.0.1:8089/v1", llama_server_url))
    return str(file)

