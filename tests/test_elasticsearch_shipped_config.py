"""The shipped Elasticsearch config as a user runs it: ``icr2 index --config indexing/kilt-sample-elasticsearch.yaml``
with its default settings (embeddings on, the checkpoint in the cache, time-based checkpoints) on a fresh machine's
cache folder (only the bundled model that scripts/setup.sh converts), killed with SIGKILL a few seconds into the
load, then run again.

- on a fresh cache (no ``checkpoints/`` folder, no sample) the load starts and records its checkpoint there;
- what the index held a few seconds before the kill is in the checkpoint, so the re-run skips it: it is neither
  embedded nor sent again (the report's ``resumed_from`` and ``written``); the checkpoint the kill left is seconds
  old (before time-based checkpoints, nothing was recorded before 10 bulks, so a kill started the load over);
- the kill leaves the index as a load in progress (refresh off, the settings to restore kept in its ``_meta``), and a
  load of another configuration (another fingerprint) refuses to resume that checkpoint and writes nothing;
- the re-run ends with exactly the passages of the corpus, each once, each with its embedding, the count check
  agreeing, the index's own settings back and the load's ``_meta`` gone, the checkpoint marked completed.

This is also the writer's kill-and-resume test (``ElasticsearchStreamingWriter`` under ``icr2 index``; its other
behaviours are in tests/test_elasticsearch_writer.py): one killed load checks both.

Only ``store.index`` (a fresh index per test) and ``corpus.max_articles`` (700 of the sample's 2,938 articles:
enough that an idle machine is still loading when the kill comes, few enough that two loads fit a test) are overridden.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.kilt.sample import build_sample
from icr2_components.stores import load_index_config
from icr2_components.stores.elasticsearch.writer import (
    LOAD_META_KEY,
    CheckpointMismatchError,
    ElasticsearchStreamingWriter,
    StreamingWriterSettings,
)

ROOT = Path(__file__).resolve().parents[1]
ARTICLES = 700
CONFIRMED_FOR_S = 7.0  # the index has held passages this long before the kill (checkpoint_seconds is 5)
LIMIT_S = 1800


def _command(index: str, report: Path) -> list[str]:
    return [sys.executable, "-m", "icr2_components.cli", "index", "--config", "indexing/kilt-sample-elasticsearch.yaml",
            "--set", f"store.index={index}", "--set", f"corpus.max_articles={ARTICLES}", "--no-progress",
            "--report", str(report)]


def _environment(cache: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False",
                ICR2_CACHE_DIR=str(cache))


def _count(es_client, index: str) -> int:
    if not es_client.indices.exists(index=index):
        return 0
    es_client.indices.refresh(index=index)
    return int(es_client.count(index=index)["count"])


def _load_settings(es_client, index: str) -> dict:
    settings = es_client.indices.get_settings(index=index, flat_settings=True).body[index]["settings"]
    return {key: settings.get(key) for key in ("index.refresh_interval", "index.number_of_replicas")}


def _load_meta(es_client, index: str) -> dict:
    return es_client.indices.get_mapping(index=index).body[index]["mappings"].get("_meta") or {}


@pytest.mark.elasticsearch
@pytest.mark.slow
def test_shipped_config_on_a_fresh_cache_killed_with_sigkill_resumes_without_redoing_what_the_index_confirmed(
    elasticsearch_url, es_client, es_index_name, tmp_path, cache_after_setup
):
    cache = cache_after_setup  # the fresh machine's cache: the bundled model set up, no checkpoints/ folder
    expected_ids = [d.id for d in KiltKnowledgeSource(build_sample().corpus, max_articles=ARTICLES).documents()]
    total = len(expected_ids)
    assert len(set(expected_ids)) == total
    log = (tmp_path / "killed.log").open("w")
    child = subprocess.Popen(_command(es_index_name, tmp_path / "killed.json"), cwd=ROOT, env=_environment(cache),
                             stdout=log, stderr=subprocess.STDOUT)
    first_seen = None  # (time, count) when the index first held passages
    deadline = time.monotonic() + LIMIT_S
    try:
        while child.poll() is None and time.monotonic() < deadline:
            count = _count(es_client, es_index_name)
            if first_seen is None and count > 0:
                first_seen = (time.monotonic(), count)
            if first_seen is not None and time.monotonic() - first_seen[0] >= CONFIRMED_FOR_S:
                break
            time.sleep(0.5)
        assert child.poll() is None, "the load ended before the kill:\n" + (tmp_path / "killed.log").read_text()[-3000:]
        child.send_signal(signal.SIGKILL)
        killed_at = time.time()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        log.close()
    assert child.returncode == -signal.SIGKILL
    held_at_kill = _count(es_client, es_index_name)

    checkpoint_path = cache / "checkpoints" / f"{es_index_name}.json"
    checkpoint = json.loads(checkpoint_path.read_text())
    assert not checkpoint["completed"] and checkpoint["written"] == checkpoint["position"] < total
    # everything the index held CONFIRMED_FOR_S before the kill is recorded (at most the last seconds are not)
    assert checkpoint["position"] >= first_seen[1] > 0
    assert checkpoint["position"] <= held_at_kill
    # what the kill threw away is what the checkpoint had not recorded: seconds, not the load
    seconds = load_index_config(ROOT / "indexing" / "kilt-sample-elasticsearch.yaml").writer.checkpoint_seconds
    age = killed_at - checkpoint_path.stat().st_mtime
    assert age < seconds + 20, f"the last checkpoint was {age:.1f} s old when the load was killed"
    # killed in the middle of the load: refresh is still off and the settings to restore are kept in _meta
    assert _load_settings(es_client, es_index_name)["index.refresh_interval"] == "-1"
    assert LOAD_META_KEY in _load_meta(es_client, es_index_name)

    # a load of another configuration (its fingerprint differs) refuses to resume this checkpoint, and writes nothing
    other = ElasticsearchStreamingWriter(elasticsearch_url, es_index_name, StreamingWriterSettings(
        checkpoint_path=checkpoint_path, fingerprint="another-configuration", progress=False))
    with pytest.raises(CheckpointMismatchError, match="fingerprint"):
        other.write(KiltKnowledgeSource(build_sample().corpus, max_articles=ARTICLES).documents())
    assert _count(es_client, es_index_name) == held_at_kill

    rerun = subprocess.run(_command(es_index_name, tmp_path / "rerun.json"), cwd=ROOT, env=_environment(cache),
                           capture_output=True, text=True, timeout=LIMIT_S)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    report = json.loads((tmp_path / "rerun.json").read_text())
    print(f"\nkilled after {first_seen[1]} passages were in the index ({held_at_kill} at the kill); checkpoint "
          f"{checkpoint['position']}; re-run: {report['resumed_from']} skipped, {report['details']['written']} sent")
    assert report["resumed_from"] == checkpoint["position"]  # the recorded prefix is skipped...
    assert report["details"]["written"] == total - checkpoint["position"]  # ...not embedded and sent again
    assert report["passages_streamed"] == report["documents_in_store"] == total and report["count_ok"] is True
    assert report["rejected"] == 0 and report["skips"]["total"] == 0
    assert report["details"]["index_count"] == report["details"]["expected_count"] == total

    ids, embedded = [], 0
    for hit in _scan(es_client, es_index_name):
        ids.append(hit["_id"])
        embedded += len(hit["_source"].get("embedding") or []) == 384
    assert len(ids) == total and sorted(ids) == sorted(expected_ids)  # exactly the passages, each once...
    assert embedded == total  # ...each with its vector
    # settings back to what the index was created with (the shipped layout: 0 replicas), the load's _meta gone
    assert _load_settings(es_client, es_index_name) == {"index.refresh_interval": None, "index.number_of_replicas": "0"}
    assert LOAD_META_KEY not in _load_meta(es_client, es_index_name)
    final = json.loads(checkpoint_path.read_text())
    assert final["completed"] is True and final["position"] == total


def _scan(es_client, index: str):
    from elasticsearch.helpers import scan

    return scan(es_client, index=index, query={"query": {"match_all": {}}}, _source=["embedding"])
