"""A real 3-node Elasticsearch cluster on loopback losing a node in the middle of a load (never a mock).

``bash scripts/elasticsearch.sh start --nodes 3`` starts the cluster (its own ports, 256 MB heaps, its own data,
wiped at the end; the project's single node on 9200 is left alone). An index with 3 shards and 1 replica is
loaded with the sample's real passages by the project's writer, configured like a user would (an index config
with the three hosts), keeping the replicas during the load (``load_replicas=None``). One node that is not the
elected master, and that holds primaries of the index, is SIGKILLed after 1,200 passages; a thread searches the
whole time through the project's own document store (BM25, the same multi-host config), from before the kill
to the end of the load. Asserted:

- the writer retried (requests resent after a connection failure, or documents resent after 429/5xx) and went
  on to the end of the stream in the same run;
- the final count is exact and every passage id is in the index exactly once;
- searches kept answering during the loss: every query after the kill answered, with hits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.stores.config import index_config_from_dict
from icr2_components.stores.elasticsearch.store import (
    build_elasticsearch_client,
    build_elasticsearch_store,
    index_mapping,
    index_settings,
)
from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "elasticsearch.sh"
NODES = 3
# ports of their own: neither the project's node (9200) nor a dev cluster started with the defaults (9201+)
HTTP_BASE = int(os.environ.get("ICR2_ES_TEST_CLUSTER_HTTP_PORT_BASE", "9211"))
TRANSPORT_BASE = int(os.environ.get("ICR2_ES_TEST_CLUSTER_TRANSPORT_PORT_BASE", "9311"))
CLUSTER_ARGS = [
    "--nodes", str(NODES), "--http-port-base", str(HTTP_BASE), "--transport-port-base", str(TRANSPORT_BASE),
    "--heap", "256m", "--cluster-name", "icr2-test-cluster",
]  # fmt: skip
HOSTS = [f"http://127.0.0.1:{HTTP_BASE + i}" for i in range(NODES)]
KILL_AFTER = 1200


def cluster_script(command: str, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "RAGAS_DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        ["bash", str(SCRIPT), command, *CLUSTER_ARGS, *extra],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cluster():
    """The 3-node cluster, started fresh for this module and stopped (data wiped) at its end."""
    started = time.monotonic()
    result = cluster_script("start", "--wipe")
    if result.returncode != 0:
        cluster_script("stop", "--wipe")
        pytest.fail(
            f"`bash scripts/elasticsearch.sh start {' '.join(CLUSTER_ARGS)}` failed (exit "
            f"{result.returncode}):\n{(result.stdout + result.stderr)[-4000:]}"
        )
    print(f"\n3-node cluster up in {time.monotonic() - started:.0f}s")
    try:
        yield HOSTS
    finally:
        stopped = cluster_script("stop", "--wipe")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def node_pids() -> dict[str, int]:
    """``{node name: pid}`` of the running nodes, from the script's own status."""
    result = cluster_script("status", timeout=60)
    pids = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith("icr2-test-cluster-") and parts[2].isdigit():
            pids[parts[0]] = int(parts[2])
    return pids


@pytest.mark.elasticsearch
@pytest.mark.slow
def test_cluster_survives_a_node_killed_mid_load(cluster, sample_files, tmp_path):
    client = build_elasticsearch_client(cluster, request_timeout=30, max_retries=3)
    health = client.cluster.health().body
    assert health["number_of_nodes"] == NODES and health["status"] == "green", health
    pids = node_pids()
    assert len(pids) == NODES, pids

    index = "icr2-es-cluster-node-loss"
    client.indices.create(
        index=index, mappings=index_mapping(), settings=index_settings(number_of_shards=3, number_of_replicas=1)
    )
    client.cluster.health(index=index, wait_for_status="green", timeout="60s")

    documents = list(KiltKnowledgeSource(sample_files.corpus).documents())
    total = len(documents)
    expected_ids = {d.id for d in documents}
    assert total > 3000 and len(expected_ids) == total

    # the project's own configuration: an index config naming the three hosts
    def config(part: str):
        return index_config_from_dict(
            {
                "name": f"cluster-{part}",
                "store": {
                    "type": "elasticsearch",
                    "hosts": cluster,
                    "index": index,
                    "request_timeout": 30,
                    "max_retries": 8,
                },
                "corpus": {"path": "sample"},
                "embedding": {"enabled": False},
                "writer": {"batch_size": 100, "thread_count": 2, "checkpoint_path": str(tmp_path / f"{part}.json")},
            },
            source="test config",
        )

    # 1. a first part, so that searches have something to find while the load runs (it turns refresh off); the
    #    load below streams every passage again (overwriting these by id), so its count check covers the index
    head = 500
    first = ElasticsearchStreamingWriter.from_config(
        config("head"), load_replicas=None, progress=False, retry_backoff=0.5
    )
    assert first.write(documents[:head]).count_ok

    # 2. searches from a thread, through the project's document store with the same multi-host settings
    store = build_elasticsearch_store(config("head"))
    queries = ["nobel prize", "world war", "river", "album", "football club", "university"]
    killed_at: list[float] = []
    outcomes: list[tuple[float, bool, int]] = []  # (time, answered, hits)
    stop = threading.Event()

    def search() -> None:
        i = 0
        while not stop.is_set():
            query = queries[i % len(queries)]
            i += 1
            try:
                hits = store._bm25_retrieval(query, top_k=5)
                outcomes.append((time.monotonic(), True, len(hits)))
            except Exception:  # a failed query is what is counted here
                outcomes.append((time.monotonic(), False, 0))
            time.sleep(0.05)

    # 3. the victim: a node that is not the elected master and holds primaries of the index
    master = client.cat.master(format="json").body[0]["node"]
    primaries = {row["node"] for row in client.cat.shards(index=index, format="json").body if row["prirep"] == "p"}
    candidates = sorted(name for name in pids if name != master)
    victim = next((name for name in candidates if name in primaries), candidates[0])

    def killing(stream):
        for i, document in enumerate(stream):
            if i == KILL_AFTER:
                os.kill(pids[victim], signal.SIGKILL)
                killed_at.append(time.monotonic())
            yield document

    searcher = threading.Thread(target=search, daemon=True)
    searcher.start()
    try:
        writer = ElasticsearchStreamingWriter.from_config(
            config("rest"), load_replicas=None, progress=False, retry_backoff=0.5
        )
        report = writer.write(killing(documents))
    finally:
        time.sleep(1.0)
        stop.set()
        searcher.join(timeout=60)
    print("\n" + report.summary())

    # the victim is gone, the cluster goes on with two nodes
    assert killed_at, "the load ended before the node was killed"
    deadline = time.monotonic() + 30
    while True:
        try:
            os.kill(pids[victim], 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"{victim} (pid {pids[victim]}) is still alive after SIGKILL"
        time.sleep(0.2)
    assert client.cluster.health().body["number_of_nodes"] == NODES - 1

    # the writer retried and carried on to the end of the stream in the same run
    assert report.retried_requests + report.retried_documents >= 1, report.summary()
    assert report.passages_streamed == report.written == total
    assert report.failed == 0
    assert json.loads((tmp_path / "rest.json").read_text())["completed"] is True

    # exact count, each id once
    client.indices.refresh(index=index)
    assert report.count_ok and report.index_count == total
    assert client.count(index=index)["count"] == total
    from elasticsearch.helpers import scan

    ids = [
        hit["_id"] for hit in scan(client, index=index, query={"query": {"match_all": {}}}, _source=False, size=1000)
    ]
    assert len(ids) == total and set(ids) == expected_ids

    # searches kept answering during the loss
    after = [(answered, hits) for at, answered, hits in outcomes if at >= killed_at[0]]
    answered = sum(1 for ok, _ in after if ok)
    failed = len(after) - answered
    print(f"searches: {len(outcomes)} in all; after the kill of {victim}: {answered} answered, {failed} failed")
    assert answered >= 5, (answered, failed)
    assert failed == 0, f"{failed} of {len(after)} searches failed after the node was killed"
    assert all(hits > 0 for ok, hits in after if ok)
    client.close()
