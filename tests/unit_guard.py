"""The unit tier's guard: a test marked ``unit`` fails if it loads model files, connects to the Elasticsearch node or a
llama.cpp server, or starts a Python interpreter, the ``icr2`` command or one of the servers' scripts.

It is a hook of Python's ``sys.addaudithook`` (PEP 578), so it sees what any library does, not only what goes
through the model cache: every file opened from Python (``from_pretrained`` reads a model folder's ``config.json``
before its weights, which safetensors then maps outside Python; ``torch.load`` opens its file itself), every socket
connection and every process started. While a unit test's set-up, call or teardown runs, the hook raises
``pytest.fail``'s exception (a ``BaseException``: ``except Exception`` does not swallow it) and records what it saw;
a recorded breach fails the phase even if the test caught that exception.

``ICR2_UNIT_GUARD_ALL=1`` applies the guard to every collected test, marked or not: a run of some test files with it
lists which of their tests could join the tier (those that pass; their durations say whether they are quick).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# files a model, tokenizer or embedder is loaded from
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".ckpt")
_MODEL_FOLDER_FILES = ("config.json", "tokenizer_config.json", "generation_config.json", "modules.json",
                       "config_sentence_transformers.json", "adapter_config.json", "sentence_bert_config.json")
_PYTHON_NAMES = ("python", "icr2")
_SERVER_SCRIPTS = ("elasticsearch.sh", "llama_server.sh", "llama-server")


_STATE = {"active": False, "breaches": []}


def _port_of(url: str | None) -> int | None:
    try:
        return urlsplit(url).port if url else None
    except ValueError:
        return None


def _forbidden_ports() -> set[int]:
    """The Elasticsearch node's and the llama.cpp servers' ports, as the test fixtures and ``.ci/run`` use them."""
    ports = {9200, 8089, 8090}
    for name in ("ICR2_ES_PORT", "ICR2_LLAMA_PORT"):
        if os.environ.get(name, "").isdigit():
            ports.add(int(os.environ[name]))
    for name in ("ICR2_ES_URL", "ICR2_LLAMA_URL"):
        port = _port_of(os.environ.get(name))
        if port:
            ports.add(port)
    return ports


_PORTS = _forbidden_ports()


def _is_model_file(path: str) -> bool:
    name = os.path.basename(path)
    if name.endswith(_WEIGHT_SUFFIXES):
        return True
    if name not in _MODEL_FOLDER_FILES:
        return False
    # a config.json of the tests' own making is not a model's: a model folder also holds weights or a tokenizer
    try:
        siblings = os.listdir(os.path.dirname(path) or ".")
    except OSError:
        return False
    return any(s.endswith(_WEIGHT_SUFFIXES) or s == "tokenizer.json" for s in siblings)


def _breach(event: str, args: tuple) -> str | None:
    if event == "open":
        path, mode = args[0], args[1]
        if isinstance(path, (str, bytes, os.PathLike)) and (mode is None or "r" in str(mode) or "+" in str(mode)):
            path = os.fsdecode(path)
            if _is_model_file(path):
                return f"opened a model file: {path}"
    elif event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in _PORTS:
            return f"connected to {address[0]}:{address[1]} (the Elasticsearch node's or a llama.cpp server's port)"
    elif event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        words = [os.fsdecode(executable)] if executable else []
        if isinstance(argv, (list, tuple)):
            words += [os.fsdecode(a) for a in argv if isinstance(a, (str, bytes, os.PathLike))]
        elif isinstance(argv, (str, bytes)):
            words += os.fsdecode(argv).split()
        if words and (Path(words[0]).name.startswith(_PYTHON_NAMES) or words[0] == sys.executable):
            return f"started a Python interpreter or the icr2 command: {' '.join(words)[:200]}"
        if any(Path(w).name in _SERVER_SCRIPTS for w in words):
            return f"started a server script: {' '.join(words)[:200]}"
    return None


def _audit(event: str, args: tuple) -> None:
    if not _STATE["active"] or event not in ("open", "socket.connect", "subprocess.Popen"):
        return
    message = _breach(event, args)
    if message:
        _STATE["breaches"].append(message)
        _STATE["active"] = False  # pytest's own reporting must not trip the hook
        raise pytest.fail.Exception(f"a unit test {message}; mark it otherwise or make it not need that")


sys.addaudithook(_audit)


def _guarded(item: pytest.Item) -> bool:
    return item.get_closest_marker("unit") is not None or os.environ.get("ICR2_UNIT_GUARD_ALL") == "1"


def _run_guarded(item: pytest.Item):
    if not _guarded(item):
        return (yield)
    _STATE["breaches"] = []
    _STATE["active"] = True
    try:
        result = yield
    finally:
        _STATE["active"] = False
    if _STATE["breaches"]:
        pytest.fail(f"a unit test {_STATE['breaches'][0]} (caught by the test, or in a thread)", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _run_guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _run_guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _run_guarded(item))
