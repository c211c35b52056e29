"""What the package ships, found by name (``icr2_components.resources``), from the installed wheel:

- every shipped pipeline, backend, index config and artifact is in the built wheel, and a copy installed from it
  (not editable) loads every shipped pipeline by name from a folder outside the checkout, artifacts included; the
  two that read a model trained here first refuse in one line, saying to train it;
- one closed-book answer, the shipped learned gate deciding from its shipped artifact, and a technique YAML as a
  Haystack ``SuperComponent`` inside a user's pipeline (which ``dumps``/``loads`` back), all from that copy;
- ``icr2 serve NAME`` serves a shipped pipeline from there;
- names beside paths: a path that exists wins, an unknown name is an error listing the shipped names.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from icr2_components.resources import shipped_file, shipped_names
from icr2_components.resources.lookup import KINDS, resolve_file

from .wheel_build import build_wheel

ROOT = Path(__file__).resolve().parents[1]
# pipelines whose reader or head is a folder `icr2 train` writes: before training, the reader refuses at load and
# the head at warm-up, each naming the folder and the command that makes it
NEEDS_TRAINING = {"fine_tuned_reader": "runs/smollm2-cpu-rta",
                  "retrieval_head_ranked": "runs/smollm2-cpu-retrieval-head"}


def test_names_list_the_shipped_files_and_a_path_that_exists_wins(tmp_path, monkeypatch):
    assert {"vanilla_rag", "adaptive_rag", "rap", "closed_book"} <= set(shipped_names("pipelines"))
    assert {"llama_cpp_server", "local", "ollama"} <= set(shipped_names("backends"))
    assert {"kilt-sample", "kilt-sample-elasticsearch"} <= set(shipped_names("indexing"))
    assert {"adaptive_rag.learned", "adaptive_rag.threshold", "rap_heads_smollm2", "ph3_heads_smollm2"} <= set(
        shipped_names("artifacts"))
    assert "icr2_table3/sft_rta" in shipped_names("training")
    assert shipped_file("pipelines", "vanilla_rag") == shipped_file("pipelines", "vanilla_rag.yaml")
    assert shipped_file("artifacts", "adaptive_rag.learned.npz").is_file()  # the knn gate's vectors, beside it
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kilt-sample").write_text("store: {type: in_memory}\n")
    assert resolve_file("indexing", "kilt-sample") == Path("kilt-sample")  # a file of that name here wins
    elasticsearch = shipped_file("indexing", "kilt-sample-elasticsearch")
    assert resolve_file("indexing", "kilt-sample-elasticsearch") == elasticsearch
    with pytest.raises(FileNotFoundError, match=r"'nope' is neither a file .* nor a shipped pipelines name; "
                                                r"shipped: adaptive_rag, "):
        resolve_file("pipelines", "nope")
    assert resolve_file("pipelines", "missing/x.yaml") == Path("missing/x.yaml")  # the caller says "not found"
    with pytest.raises(ValueError, match="Unknown kind of shipped file 'models'"):
        shipped_names("models")


def test_an_unknown_name_in_a_loader_is_one_line_listing_the_names():
    from icr2_components import load_pipeline
    from icr2_components.backends import BackendError, load_backend
    from icr2_components.stores.config import load_index_config

    for call, kind in [(lambda: load_pipeline("vanila_rag"), "pipelines"),
                       (lambda: load_index_config("kilt-smaple"), "indexing")]:
        with pytest.raises(FileNotFoundError) as raised:
            call()
        assert f"shipped {kind} name; shipped: " in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(BackendError, match="shipped backends name; shipped: llama_cpp_server, local"):
        load_backend("llama_server")
    with pytest.raises(FileNotFoundError, match=r"Pipeline file not found: nowhere/x\.yaml"):
        load_pipeline("nowhere/x.yaml")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout, installed (no dependencies, not editable) into a folder of its own."""
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for kind, suffix in KINDS.items():
        for name in shipped_names(kind):
            assert f"icr2_components/resources/{kind}/{name}{suffix}" in names, (kind, name)
    assert "icr2_components/resources/artifacts/adaptive_rag.learned.npz" in names
    return target


def run_outside(installed: Path, code: str, tmp_path: Path, timeout: int = 900) -> dict:
    """Run ``code`` with the installed copy first on the path, from ``tmp_path``; it prints one JSON line last."""
    env = {**os.environ, "PYTHONPATH": str(installed)}  # torch's default threads: the test waits on it
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_shipped_pipeline_loads_by_name_outside_the_checkout(installed, tmp_path):
    result = run_outside(installed, """
        import json
        import icr2_components
        from haystack import SuperComponent
        from icr2_components import load_pipeline, technique_component
        from icr2_components.resources import shipped_names

        loaded, refused = [], {}
        for name in shipped_names("pipelines"):
            try:
                pipeline = load_pipeline(name)
                assert isinstance(technique_component(name), SuperComponent)
                if name == "retrieval_head_ranked":
                    pipeline.get_component("ranker").warm_up()
                loaded.append(name)
            except Exception as error:
                refused[name] = str(error)
        print(json.dumps({"module": icr2_components.__file__, "loaded": loaded, "refused": refused}))
    """, tmp_path)
    assert result["module"].startswith(str(installed))  # the installed copy, not the checkout
    assert set(result["refused"]) == set(NEEDS_TRAINING), result["refused"]
    for name, folder in NEEDS_TRAINING.items():
        message = result["refused"][name]
        assert folder in message and "train" in message and "\n" not in message, message
    assert len(result["loaded"]) == len(shipped_names("pipelines")) - len(NEEDS_TRAINING)


def test_an_answer_the_shipped_gate_and_a_technique_component_outside_the_checkout(installed, tmp_path):
    result = run_outside(installed, """
        import json
        from haystack import Pipeline
        from icr2_components import load_pipeline, technique_component

        closed = load_pipeline("closed_book")
        answer = closed.run({"prompt": {"query": "What is the capital of France?"}})["reader"]["replies"][0].text

        gate = load_pipeline("adaptive_rag").get_component("gate")   # artifact: adaptive_rag.learned (shipped)
        gate.warm_up()
        decision = gate.run(query="Who won the most recent Tour de France?")

        outer = Pipeline()
        outer.add_component("closed_book", technique_component("closed_book"))
        again = Pipeline.loads(outer.dumps(), allowed_modules=["icr2_components.*"])
        component = again.get_component("closed_book")
        replies = outer.run({"closed_book": {"query": "What is the capital of France?"}})["closed_book"]["replies"]
        print(json.dumps({"answer": answer, "routes": sorted(k for k in decision if k in ("retrieve", "no_retrieval")),
                          "artifact": gate.parameters_of().artifact, "inputs": component.input_mapping,
                          "outputs": component.output_mapping, "super_answer": replies[0].text}))
    """, tmp_path)
    assert "Paris" in result["answer"] and "Paris" in result["super_answer"]
    assert result["artifact"] == "adaptive_rag.learned" and len(result["routes"]) == 1
    assert result["inputs"] == {"query": ["prompt.query"]} and result["outputs"] == {"reader.replies": "replies"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_icr2_serve_a_shipped_name_outside_the_checkout(installed, tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(installed), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    process = subprocess.Popen([sys.executable, "-m", "icr2_components.cli", "serve", "closed_book", "--port",
                                str(port), "--max-new-tokens", "8"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, process.stderr.read()[-3000:]
            try:
                if httpx.get(f"{url}/status", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "icr2 serve closed_book did not come up"
            time.sleep(1)
        assert httpx.get(f"{url}/status", timeout=10).json() == {"status": "Up!", "pipelines": ["closed_book"]}
        response = httpx.post(f"{url}/closed_book/run", json={"query": "What is the capital of France?"}, timeout=120)
        assert response.status_code == 200 and "Paris" in response.json()["result"]["replies"][0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
