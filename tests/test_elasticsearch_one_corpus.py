"""Against the real node (scripts/elasticsearch.sh): an index holds one corpus, and single nodes on two ports start
and stop independently. (A load killed at any moment loses only seconds of work:
tests/test_elasticsearch_shipped_config.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from icr2_components.stores import IndexHandle, index_config_from_dict
from icr2_components.stores.elasticsearch.writer import SOURCE_META_KEY
from icr2_components.stores.errors import IndexConfigMismatchError

pytestmark = pytest.mark.elasticsearch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "elasticsearch.sh"


def _corpus(path: Path, prefix: str, articles: int) -> Path:
    lines = [json.dumps({"wikipedia_id": f"{prefix}{i}", "wikipedia_title": f"{prefix} {i}",
                         "text": [f"{prefix} {i}", " ".join(f"{prefix}{i}w{j}" for j in range(150))]})
             for i in range(articles)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(url: str, index: str, corpus: Path, tmp_path: Path, name: str) -> dict:
    return {"name": name, "store": {"type": "elasticsearch", "hosts": url, "index": index, "max_retries": 1},
            "corpus": {"path": str(corpus)}, "embedding": {"enabled": False},
            "writer": {"checkpoint_path": str(tmp_path / f"{name}.ckpt.json")}}


def test_a_second_corpus_is_refused_before_the_first_write_naming_both_fingerprints(elasticsearch_url, es_client,
                                                                                     es_index_name, tmp_path):
    first = _config(elasticsearch_url, es_index_name, _corpus(tmp_path / "a.jsonl", "alpha", 6), tmp_path, "a")
    report = IndexHandle(index_config_from_dict(first)).build(progress=False)
    assert report.count_ok and report.documents_in_store == 12
    meta = es_client.indices.get_mapping(index=es_index_name)[es_index_name]["mappings"]["_meta"]
    recorded = meta[SOURCE_META_KEY]["fingerprint"]

    second = _config(elasticsearch_url, es_index_name, _corpus(tmp_path / "b.jsonl", "beta", 4), tmp_path, "b")
    with pytest.raises(
        IndexConfigMismatchError, match=rf"stream fingerprint {recorded}.*this config's is [0-9a-f]{{20}}"
    ):
        IndexHandle(index_config_from_dict(second)).build(progress=False)
    es_client.indices.refresh(index=es_index_name)
    assert es_client.count(index=es_index_name)["count"] == 12  # nothing of the second corpus went in
    # the command says it in one line (it loaded 8 more passages, then failed its count check: "unexpected error")
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(second))
    result = subprocess.run([sys.executable, "-m", "icr2_components.cli", "index", "--config", str(path)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"stream fingerprint {recorded}" in result.stderr and "unexpected" not in result.stderr
    # the same corpus again is a re-run (overwrites by id), not a refusal
    again = IndexHandle(index_config_from_dict(first)).build(progress=False)
    assert again.count_ok and again.documents_in_store == 12


# -- two single nodes, two ports --------------------------------------------------------------------------------


def _script(command: str, port: int, heap: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ICR2_ES_PORT": str(port)}
    if heap:
        env["ICR2_ES_HEAP"] = heap
    return subprocess.run(
        ["bash", str(SCRIPT), command], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def _node(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/_nodes/_local/process", timeout=5) as response:
            body = json.loads(response.read())
    except OSError:
        return None
    node = next(iter(body["nodes"].values()))
    return {"id": next(iter(body["nodes"])), "pid": node["process"]["id"]}


@pytest.mark.slow
def test_two_single_nodes_on_two_ports_start_and_stop_independently(elasticsearch_url):
    """With a node on the default port, `ICR2_ES_PORT=9250 ... start` found that node's pid file and waited on it
    (starting nothing), and `... stop` would have stopped it."""
    first = _node(elasticsearch_url)
    assert first is not None
    port = 9250
    second_url = f"http://127.0.0.1:{port}"
    assert _node(second_url) is None, f"something already answers on {second_url}"
    assert _script("status", port).returncode == 1  # the default port's node is not this port's
    try:
        started = _script("start", port, heap="256m")
        assert started.returncode == 0, started.stderr[-3000:]
        second = _node(second_url)
        assert second is not None and second["pid"] != first["pid"] and second["id"] != first["id"]
        assert f"pid {second['pid']}" in _script("status", port).stdout
        stopped = _script("stop", port)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
        assert f"pid {second['pid']}" in stopped.stderr
        assert _node(second_url) is None
        assert _node(elasticsearch_url) == first  # the default port's node was not touched
    finally:
        _script("stop", port)


def test_hybrid_search_on_a_never_built_index_says_build_it(elasticsearch_url, es_index_name, tmp_path):
    """It said the index was "built without embeddings"."""
    config = index_config_from_dict(
        {
            "name": "never",
            "corpus": {"path": "sample"},
            "embedding": {"enabled": False},
            "store": {"type": "elasticsearch", "hosts": elasticsearch_url, "index": es_index_name},
        }
    )
    from icr2_components.stores.errors import IndexNotBuiltError

    with pytest.raises(IndexNotBuiltError, match=rf"'{es_index_name}' at .* does not exist: build it first"):
        IndexHandle(config).retrieve("who won", method="hybrid")


def test_a_100000_character_query_names_the_clause_limit_not_zero(elasticsearch_url, es_index_name, tmp_path):
    """Elasticsearch's refusal carries no number here; the message said the node allows "0" query clauses."""
    from icr2_components.stores.elasticsearch.backend import QueryTooLongError

    config = _config(elasticsearch_url, es_index_name, _corpus(tmp_path / "a.jsonl", "alpha", 2), tmp_path, "q")
    handle = IndexHandle(index_config_from_dict(config))
    handle.build(progress=False)
    query = " ".join(f"w{i}" for i in range(15_000))[:100_000]
    with pytest.raises(
        QueryTooLongError, match=r"too long for Elasticsearch's BM25.*query clauses the node allows"
    ) as caught:
        handle.retrieve(query, method="bm25")
    assert "node's 0" not in str(caught.value) and " 0 query clauses" not in str(caught.value)
