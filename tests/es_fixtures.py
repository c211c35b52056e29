"""Pytest plugin: the real Elasticsearch node for tests marked ``elasticsearch`` (never a mock).

Loaded by ``pytest_plugins = ["tests.es_fixtures"]`` in tests/conftest.py.

``elasticsearch_url`` (session): the node's URL, ``ICR2_ES_URL`` or ``http://127.0.0.1:${ICR2_ES_PORT:-9200}``.
When nothing answers there, the fixture runs ``bash scripts/elasticsearch.sh start`` itself (minutes on a
fresh machine: download, then about a minute of JVM start-up on 2 cores) and stops the node at the end of
the session, only when it started it (``ICR2_ES_KEEP=1`` leaves it running, e.g. when other test sessions
share the node). When the node cannot be started the tests fail with the script's output; they are not
skipped.

``es_client`` (session): an ``elasticsearch.Elasticsearch`` client for that URL.
``es_index_name`` (function): a unique index name, deleted after the test.
``es_sample_index`` (session): indexing/kilt-sample-elasticsearch.yaml as shipped, pointed at the node and a fresh
index that holds the embedded sample index's passages and vectors, written once for every test that reads it
(``(config_path, index_name)``; deleted at the end). Tests that only search it share one write, not one each.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from tests.stop_at_run_end import stop_now_or_at_run_end

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "elasticsearch.sh"


def _default_url() -> str:
    return os.environ.get("ICR2_ES_URL") or f"http://127.0.0.1:{os.environ.get('ICR2_ES_PORT', '9200')}"


def node_health(url: str, timeout: float = 3.0) -> dict | None:
    """The cluster health document, or None when nothing (or not Elasticsearch) answers at ``url``."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/_cluster/health", timeout=timeout) as response:
            body = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return body if isinstance(body, dict) and "status" in body else None


def _script_env() -> dict[str, str]:
    env = dict(os.environ)
    if "ICR2_ES_URL" not in os.environ:
        env.setdefault("ICR2_ES_PORT", "9200")
    return env


def _run_script(command: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), command], cwd=REPO_ROOT, env=_script_env(), capture_output=True, text=True,
        timeout=timeout
    )


@pytest.fixture(scope="session")
def elasticsearch_url():
    url = _default_url()
    started_here = False
    if node_health(url) is None:
        if os.environ.get("ICR2_ES_URL"):
            pytest.fail(
                f"No Elasticsearch answers at ICR2_ES_URL={url}; start it, or unset ICR2_ES_URL to let the tests start "
                "a local node."
            )
        try:
            result = _run_script("start", timeout=900)
        except subprocess.TimeoutExpired as error:
            pytest.fail(f"`bash scripts/elasticsearch.sh start` did not finish in {error.timeout:.0f}s")
        if result.returncode != 0 or node_health(url) is None:
            pytest.fail(
                f"No Elasticsearch at {url}, and `bash scripts/elasticsearch.sh start` failed (exit "
                f"{result.returncode}):\n"
                + (result.stdout + result.stderr)[-4000:]
            )
        started_here = True
    yield url
    if started_here and os.environ.get("ICR2_ES_KEEP", "") not in ("1", "true", "yes"):
        stop_now_or_at_run_end(["bash", str(SCRIPT), "stop"], REPO_ROOT, _script_env(), timeout=180)


@pytest.fixture(scope="session")
def es_client(elasticsearch_url):
    from icr2_components.stores.elasticsearch.store import build_elasticsearch_client

    client = build_elasticsearch_client(elasticsearch_url, request_timeout=60)
    yield client
    client.close()


@pytest.fixture
def es_index_name(es_client, request):
    """A fresh index name for one test (``icr2-test-<test>-<random>``), deleted afterwards."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"icr2-test-{stem}-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture(scope="session")
def es_sample_index(elasticsearch_url, es_client, tmp_path_factory):
    import yaml

    from icr2_components.stores import load_index_config, open_index
    from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter

    folder = tmp_path_factory.mktemp("es-sample")
    index = f"{os.environ.get('ICR2_TEST_INDEX_PREFIX', 'icr2-test')}-sample-{uuid.uuid4().hex[:8]}"
    data = yaml.safe_load((REPO_ROOT / "indexing" / "kilt-sample-elasticsearch.yaml").read_text())
    data["store"].update(hosts=elasticsearch_url, index=index)
    data["writer"]["checkpoint_path"] = str(folder / "checkpoint.json")
    path = folder / "kilt-sample-elasticsearch.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    # the passages with the vectors the embedded sample index already computed (same model, same passages): the
    # tests spend their time on retrieval and pipelines, not on embedding the sample again
    embedded = open_index(REPO_ROOT / "indexing" / "kilt-sample.yaml")  # cached on disk after its first build
    documents = sorted(embedded.document_store.storage.values(), key=lambda d: d.id)
    assert all(d.embedding is not None for d in documents)
    config = load_index_config(path)
    assert config.embedding.model == embedded.config.embedding.model
    report = ElasticsearchStreamingWriter.from_config(config, progress=False).write(documents)
    assert report.count_ok and report.passages_streamed == len(documents) == embedded.count()
    yield str(path), index
    es_client.indices.delete(index=index, ignore_unavailable=True)
