"""The built wheel's core (no extras), installed into a fresh virtual environment, used as a Haystack user would.

From a folder outside the checkout, a script builds a pipeline in Python from Haystack's own
``InMemoryDocumentStore`` and ``InMemoryBM25Retriever`` and this library's corpus builder, reorderer, prompt
builder and served reader pointed at the real llama.cpp server. It must answer, never import torch (the core does
not install it), and leave the process environment exactly as it found it when the library's modules are imported.

The passages are real: the NaturalQuestions-Open question's gold passage and 1,000 DPR Wikipedia passages from
../shared/data (read by the test, handed to the script as a JSON file). pip installs from PyPI with its cache.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from .wheel_build import build_wheel

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"

pytestmark = [pytest.mark.slow, pytest.mark.llama_server, pytest.mark.timeout(1800)]

USER_SCRIPT = r'''
import json
import os
import sys

import haystack  # noqa: F401  (Haystack reads HAYSTACK_TELEMETRY_ENABLED here: the test's environment has it off)

# from here on no variable of ours is set, so a library that set one with setdefault would show
os.environ.pop("HAYSTACK_TELEMETRY_ENABLED", None)
before = dict(os.environ)

import icr2_components
from icr2_components.builders import ConfounderAwareCorpusBuilder, CorpusInContextPromptBuilder
from icr2_components.readers.served_chat_reader import ServedChatReader
from icr2_components.reorderers import LostInTheMiddleReorderer

after_import = dict(os.environ)

from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

url, model, passages_file = sys.argv[1:4]
with open(passages_file, encoding="utf-8") as handle:
    data = json.load(handle)
store = InMemoryDocumentStore()
store.write_documents([Document(content=p["text"], meta={"title": p["title"]}) for p in data["passages"]])

pipeline = Pipeline()
pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=8))
pipeline.add_component("builder", ConfounderAwareCorpusBuilder(retrievers=["bm25"], budget_passages=4, seed=0))
pipeline.add_component("reorderer", LostInTheMiddleReorderer())
pipeline.add_component("prompt_builder", CorpusInContextPromptBuilder(answer_instruction="retrievalqa"))
pipeline.add_component("reader", ServedChatReader(api_base_url=url, model=model, max_new_tokens=24, timeout_s=120))
pipeline.connect("retriever.documents", "builder.bm25")
pipeline.connect("builder.documents", "reorderer.documents")
pipeline.connect("reorderer.documents", "prompt_builder.documents")
pipeline.connect("prompt_builder.prompt", "reader.messages")

question = data["question"]
result = pipeline.run({"retriever": {"query": question}, "builder": {"query": question},
                       "prompt_builder": {"query": question}}, include_outputs_from={"reorderer"})
print(json.dumps({
    "answer": result["reader"]["replies"][0].text,
    "passages": [d.meta.get("title") for d in result["reorderer"]["documents"]],
    "torch_imported": "torch" in sys.modules,
    "environment_changed": sorted(k for k in set(before) | set(after_import) if before.get(k) != after_import.get(k)),
    "package_file": icr2_components.__file__,
}))
'''


def _passages(path: Path) -> dict:
    """The first NQ-Open question, its gold passage and the 1,000 DPR passages (real text from ../shared/data)."""
    with gzip.open(DATA / "nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as handle:
        record = json.loads(handle.readline())
    passages = [{"title": c["title"], "text": c["text"]} for c in record["ctxs"] if c.get("isgold")]
    with open(DATA / "dpr-wiki-sample-1000.jsonl", encoding="utf-8") as handle:
        for line in handle:
            title, _, text = json.loads(line)["contents"].partition("\n")
            passages.append({"title": title.strip('"'), "text": text})
    path.write_text(json.dumps({"question": record["question"], "answers": record["answers"],
                                "passages": passages}), encoding="utf-8")
    return {"question": record["question"], "gold_title": passages[0]["title"]}


def test_the_core_wheel_answers_through_a_served_reader_without_torch_or_environment_changes(
        tmp_path, llama_server_url, llama_model_alias):
    wheel = build_wheel(tmp_path)
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
                            check=True)
    installed = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "icr2-components" in installed or "icr2_components" in installed
    assert not installed & {"torch", "transformers", "sentence-transformers", "ragas", "elasticsearch"}, installed

    user = tmp_path / "user"  # outside the checkout: the library comes from the fresh environment only
    user.mkdir()
    (user / "rag.py").write_text(USER_SCRIPT, encoding="utf-8")
    case = _passages(user / "passages.json")
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
                        "TOKENIZERS_PARALLELISM", "RAGAS_DO_NOT_TRACK", "VIRTUAL_ENV"}}
    env["HAYSTACK_TELEMETRY_ENABLED"] = "False"
    run = subprocess.run([str(python), "rag.py", llama_server_url, llama_model_alias, "passages.json"], cwd=user,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])

    assert Path(result["package_file"]).resolve().is_relative_to(environment.resolve()), result["package_file"]
    assert result["answer"].strip(), result
    assert case["gold_title"] in result["passages"], result  # BM25 found the gold passage for the reader
    assert result["torch_imported"] is False
    assert result["environment_changed"] == []

    # the icr2 command works from the core alone: every command is listed, one whose extra is missing (serve)
    # refuses in one line naming it, and a core command (icr2 index, BM25 only) runs
    icr2 = environment / "bin" / "icr2"
    listing = subprocess.run([str(icr2), "--help"], cwd=user, env=env, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert "serve" in listing.stdout and "reproduce" in listing.stdout and "index" in listing.stdout
    refused = subprocess.run([str(icr2), "serve", "closed_book"], cwd=user, env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert "'serve' extra" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    rows = json.loads((user / "passages.json").read_text(encoding="utf-8"))["passages"]
    (user / "mine.jsonl").write_text("".join(json.dumps({"pid": f"p{i}", "heading": p["title"], "body": p["text"]})
                                             + "\n" for i, p in enumerate(rows)), encoding="utf-8")
    (user / "mine.yaml").write_text(
        "corpus: {format: jsonl, path: mine.jsonl, fields: {id: pid, title: heading, text: body}, "
        "count_tokens_for: []}\nembedding: {enabled: false}\nstore: {type: in_memory, persist_path: mine.json}\n",
        encoding="utf-8")
    indexed = subprocess.run([str(icr2), "index", "--config", "mine.yaml", "--no-progress", "--report", "report.json"],
                             cwd=user, env=env, capture_output=True, text=True, timeout=300)
    assert indexed.returncode == 0, indexed.stderr[-3000:]
    report = json.loads((user / "report.json").read_text(encoding="utf-8"))
    assert report["count_ok"] and report["documents_in_store"] == report["passages_streamed"] >= len(rows), report
