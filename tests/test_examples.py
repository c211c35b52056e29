"""The examples and the README's first Python, run as a user runs them: each script in a fresh interpreter from a
temporary folder outside the checkout, on the real bundled SmolLM2 (and the real llama.cpp server for the served
reader), its printed answer checked; then, in the same interpreter, the example's pipeline saved with
``Pipeline.dumps()``, and loaded in another fresh interpreter with Haystack's own
``Pipeline.loads(..., allowed_modules=["icr2_components.*"])``, where it equals the original and answers. (The save
rides on the run's interpreter, its model already loaded: one interpreter start fewer per example, CI time.)"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from icr2_components.kilt.sample import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples"
SERVED = "served_reader.py"
LOCAL = ["corpus_in_context_rag.py", "adaptive_rag.py", "rap_reader.py", "technique_as_component.py"]
EXAMPLES = [pytest.param(name, marks=pytest.mark.slow) for name in LOCAL] + [
    pytest.param(SERVED, marks=[pytest.mark.slow, pytest.mark.llama_server])
]


@pytest.fixture
def server_env(request):
    """ICR2_LLAMA_URL for the served example (the real server, started by its fixture when down)."""
    if request.node.callspec.params["name"] != SERVED:
        return {}
    return {"ICR2_LLAMA_URL": request.getfixturevalue("llama_server_url")}


def run_python(args, cwd, env=None, timeout=900):
    """A fresh interpreter in `cwd`, as a user's shell starts it: the data folder named by ICR2_DATA_DIR. Its
    threads are torch's default (the test waits on it: one thread left a core idle)."""
    full_env = {**os.environ, "ICR2_DATA_DIR": str(shared_data_dir()), **(env or {})}
    full_env.pop("PYTHONPATH", None)  # the installed package, not the checkout on the path
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def printed(stdout):
    """The `label: value` lines a script printed."""
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line and " -> " not in line)


def first_nq_record():
    import gzip

    with gzip.open(shared_data_dir() / "nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        return json.loads(handle.readline())


@pytest.mark.unit
def test_the_examples_are_the_five_tutorials():
    assert sorted(p.name for p in EXAMPLES_DIR.glob("*.py")) == sorted([*LOCAL, SERVED, "nq_open.py"])
    for name in [*LOCAL, SERVED]:
        source = (EXAMPLES_DIR / name).read_text()
        assert "def build_pipeline(" in source and "def main(" in source, name
        assert "PipelineSpec" not in source, name  # built in Python, as Haystack's tutorials do


def check_answer(name, stdout):
    """The lines the example printed: the question, a non-empty answer, the gold answers, its own lines."""
    lines = printed(stdout)
    record = first_nq_record()
    assert lines["question"] == record["question"], stdout
    assert lines["answer"].strip(), stdout
    assert lines["gold"] == " | ".join(record["answers"]), stdout
    if name == "adaptive_rag.py":
        # The shipped learned gate's cut retrieves for every question (its artifact: retrieval rate 1.0 on the
        # questions it was fitted on), so the question took the retrieval branch through the BranchJoiner.
        assert re.fullmatch(r"retrieve \(score \d\.\d\d\)", lines["gate"]), stdout
    if name == "rap_reader.py":
        kept = int(re.match(r"(\d+) passage", lines["kept by the retrieval heads"]).group(1))
        assert 1 <= kept <= 4, stdout  # the union of 4 heads' top passage
    if name == "technique_as_component.py":
        assert lines["closed-book answer"].strip(), stdout
    if name == SERVED:
        concurrent = [line for line in stdout.splitlines() if " -> " in line]
        assert len(concurrent) == 3 and all(line.split(" -> ", 1)[1].strip() for line in concurrent), stdout


DUMP = """
import pickle, sys
sys.path.insert(0, __EXAMPLES__)
from haystack.document_stores.in_memory import InMemoryDocumentStore
import __MODULE__ as example

pipeline = example.build_pipeline(InMemoryDocumentStore())
open("pipeline.yaml", "w").write(pipeline.dumps())
pickle.dump(pipeline.to_dict(), open("pipeline.pickle", "wb"))
"""

LOAD_AND_RUN = """
import pickle, sys
sys.path.insert(0, __EXAMPLES__)
from haystack import Pipeline
import __MODULE__ as example
from nq_open import first_question, nq_documents

def canonical(data):
    # a pipeline's connections are a set of edges: Haystack lists them in the order its graph holds them
    return {**data, "connections": sorted(data["connections"], key=lambda c: (c["sender"], c["receiver"]))}


# Haystack's own loader; classes outside haystack need the allowlist.
pipeline = Pipeline.loads(open("pipeline.yaml").read(), allowed_modules=["icr2_components.*"])
reloaded, original = canonical(pipeline.to_dict()), canonical(pickle.load(open("pipeline.pickle", "rb")))
assert reloaded == original, (reloaded, original)
stores = [c.document_store for _, c in pipeline.walk() if hasattr(c, "document_store")]
assert len(stores) == 1, stores
stores[0].write_documents(nq_documents(limit=300))  # a store's documents are not part of its serialisation
answer = example.ask(pipeline, first_question()[0])
print("answer:", answer[0] if isinstance(answer, tuple) else answer)
"""


def script(template, name):
    return (template.replace("__EXAMPLES__", repr(str(EXAMPLES_DIR)))
            .replace("__SCRIPT__", repr(str(EXAMPLES_DIR / name)))
            .replace("__MODULE__", name.removesuffix(".py")))


# `python examples/NAME.py` (its folder first on the path, run as __main__), then DUMP in the same interpreter
RUN_THEN_DUMP = """
import runpy, sys
sys.path.insert(0, __EXAMPLES__)
sys.argv = [__SCRIPT__]
runpy.run_path(__SCRIPT__, run_name="__main__")
""" + DUMP


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_from_outside_the_checkout_answers_and_round_trips_through_dumps_and_loads(name, tmp_path,
                                                                                                server_env):
    stdout = run_python(["-c", script(RUN_THEN_DUMP, name)], cwd=tmp_path, env=server_env)
    check_answer(name, stdout)
    assert "icr2_components." in (tmp_path / "pipeline.yaml").read_text()
    stdout = run_python(["-c", script(LOAD_AND_RUN, name)], cwd=tmp_path, env=server_env)
    assert printed(stdout)["answer"].strip(), stdout


def test_plain_loads_without_the_allowlist_names_the_blocked_module(tmp_path):
    """What a Haystack user sees without `allowed_modules`: the docs' reason to pass it."""
    run_python(["-c", script(DUMP, "corpus_in_context_rag.py")], cwd=tmp_path)
    check = textwrap.dedent("""
        from haystack import Pipeline
        try:
            Pipeline.loads(open("pipeline.yaml").read())
        except Exception as error:
            print("refused:", type(error).__name__, str(error).replace(chr(10), " "))
    """)
    refused = printed(run_python(["-c", check], cwd=tmp_path))["refused"]
    assert "icr2_components" in refused, refused


def readme_first_python():
    text = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_readme_opens_with_the_commands_then_the_install_line_then_a_python_pipeline():
    text = (ROOT / "README.md").read_text()
    head = text[: text.index("```python")]
    assert "bash scripts/setup.sh && .venv/bin/icr2 quickstart" in head
    assert ("bash scripts/setup.sh --tests && .venv/bin/python -m pytest -m unit -n 2 && .venv/bin/python -m pytest "
            '-m "not unit" -n 2 --dist loadgroup') in head
    assert re.search(r'pip install "icr2-components\[local\]', head)
    code = readme_first_python()
    for name in ("InMemoryDocumentStore", "InMemoryBM25Retriever", "ConfounderAwareCorpusBuilder",
                 "LostInTheMiddleReorderer", "CorpusInContextPromptBuilder", "LocalChatReader"):
        assert name in code, name
    assert text.count("\n", 0, text.index("```python")) < 40  # the first Python is on the first screen


@pytest.mark.slow
def test_readme_first_python_runs_from_outside_the_checkout(tmp_path):
    (tmp_path / "readme_pipeline.py").write_text(readme_first_python())
    stdout = run_python(["readme_pipeline.py"], cwd=tmp_path)
    assert "Röntgen" in stdout, stdout  # the answer the README shows, from the passage BM25 ranks first
