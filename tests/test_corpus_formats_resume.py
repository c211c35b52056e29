"""A streamed corpus (`datasets` data files, read with `load_dataset(..., streaming=True)`) killed with SIGKILL in the
middle of `icr2 index` into Elasticsearch resumes exactly: the rerun skips the passages the checkpoint confirmed,
writes the rest once, and the index then holds exactly the corpus's passages (ids, texts, one vector each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from icr2_components.corpora import corpus_reader
from icr2_components.stores import IndexHandle, load_index_config
from tests.test_corpus_formats import FIELDS, dpr_rows

pytestmark = pytest.mark.elasticsearch

REPO = Path(__file__).resolve().parents[1]
ROWS = 120


def test_streamed_datasets_corpus_killed_mid_load_resumes_exactly(elasticsearch_url, es_client, es_index_name,
                                                                   tmp_path):
    rows = dpr_rows(ROWS)
    files = tmp_path / "data"
    files.mkdir()
    for part in range(3):
        chunk = rows[part * 40:(part + 1) * 40]
        if part == 1:
            chunk = [*chunk[:20], {**chunk[0], "doc_id": "null-body", "body": None}, *chunk[20:]]
        (files / f"part-{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunk), encoding="utf-8")
    checkpoint = tmp_path / "load.ckpt.json"
    config = {
        "name": "streamed", "store": {"type": "elasticsearch", "hosts": elasticsearch_url, "index": es_index_name},
        "corpus": {"format": "hf_dataset", "path": str(files / "*.jsonl"), "fields": FIELDS, "count_tokens_for": []},
        # embeddings make the load slow enough to be killed in the middle (a real load's slow step)
        "embedding": {"enabled": True, "model": "all-minilm-l6-v2", "batch_size": 8},
        "writer": {"batch_size": 10, "checkpoint_path": str(checkpoint), "checkpoint_every": 1,
                   "checkpoint_seconds": 0.5},
    }
    path = tmp_path / "streamed.yaml"
    path.write_text(yaml.safe_dump(config))

    child = subprocess.Popen([sys.executable, "-m", "icr2_components.cli", "index", "--config", str(path)],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    try:
        while child.poll() is None and not checkpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert child.poll() is None, f"the load ended before any checkpoint:\n{child.stderr.read().decode()[-3000:]}"
        assert checkpoint.exists(), "no checkpoint within 300 s"
        started = time.monotonic()
        time.sleep(0.3)
        assert child.poll() is None, "the load finished before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    state = json.loads(checkpoint.read_text())
    assert not state["completed"] and 0 < state["position"] < ROWS

    print(f"killed {time.monotonic() - started:.1f} s after the first checkpoint, at position {state['position']}")
    rerun = time.monotonic()
    report = IndexHandle(load_index_config(path)).build(progress=False)
    print(f"the rerun took {time.monotonic() - rerun:.1f} s")
    assert report.resumed_from == state["position"]
    assert report.passages_streamed == ROWS and report.count_ok and report.documents_in_store == ROWS
    assert report.skips["counts"] == {"missing text field": 1}

    # exactly the corpus: every passage once, with its text and a vector
    expected = {d.id: d.content for d in corpus_reader(load_index_config(path).corpus).documents()}
    es_client.indices.refresh(index=es_index_name)
    hits = es_client.search(index=es_index_name, size=ROWS + 10, query={"match_all": {}},
                            source_includes=["content", "embedding"])["hits"]["hits"]
    assert {hit["_id"]: hit["_source"]["content"] for hit in hits} == expected
    assert all(len(hit["_source"]["embedding"]) == 384 for hit in hits)
