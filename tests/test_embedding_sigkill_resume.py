"""``icr2 embed`` killed with SIGKILL once it has recorded a shard, then run again with the same command: the re-run
reads past what the manifest records without embedding it, embeds only the rest, and the folder ends holding every
passage once, in corpus order, with the vectors an uninterrupted pass gives.

Shards of 50 passages (``--shard-size``; the default 10,000 closes shards every ``--shard-seconds`` 10, and a fast
machine embeds this whole corpus within one such shard, so the kill would come after the end), the shipped in-memory
config's corpus cut to its first 400 articles (470 passages).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from icr2_components.stores import load_index_config
from icr2_components.stores.embedding_shards import ShardVectors, corpus_source, read_manifest

ROOT = Path(__file__).resolve().parents[1]
ARTICLES = 400
SHARD_SIZE = 50
LIMIT_S = 1800


def _command(out: Path, report: Path) -> list[str]:
    return [sys.executable, "-m", "icr2_components.cli", "embed", "indexing/kilt-sample.yaml", "--out", str(out),
            "--set", f"corpus.max_articles={ARTICLES}", "--shard-size", str(SHARD_SIZE), "--no-progress",
            "--report", str(report)]


def _environment() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False")


def _recorded(out: Path) -> int:
    try:
        return int(read_manifest(out)["passages"])
    except (FileNotFoundError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_embed_killed_with_sigkill_resumes_without_re_embedding_recorded_shards(tmp_path):
    config = load_index_config("indexing/kilt-sample.yaml", overrides={"corpus.max_articles": ARTICLES})
    ids = [document.id for document in corpus_source(config).documents()]
    out = tmp_path / "vectors"
    log = (tmp_path / "killed.log").open("w")
    child = subprocess.Popen(_command(out, tmp_path / "killed.json"), cwd=ROOT, env=_environment(), stdout=log,
                             stderr=subprocess.STDOUT)
    deadline = time.monotonic() + LIMIT_S
    try:
        while child.poll() is None and time.monotonic() < deadline and not _recorded(out):
            time.sleep(0.02)
        assert child.poll() is None, "the pass ended before the kill:\n" + (tmp_path / "killed.log").read_text()[-3000:]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        log.close()
    assert child.returncode == -signal.SIGKILL
    recorded = _recorded(out)
    assert 0 < recorded < len(ids)

    again = subprocess.run(_command(out, tmp_path / "again.json"), cwd=ROOT, env=_environment(), capture_output=True,
                           text=True, timeout=LIMIT_S)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    report = json.loads((tmp_path / "again.json").read_text())
    assert report["resumed_passages"] == recorded  # read past, not embedded again
    assert report["passages_embedded"] == len(ids) - recorded
    assert report["complete"] and report["passages_total"] == len(ids)

    manifest = read_manifest(out)
    written = [pid for shard in manifest["shards"] for pid in (out / shard["ids"]).read_text().splitlines()]
    assert written == ids  # every passage once, in corpus order
    # the vectors are the model's: the first and last passages embedded directly match the shards
    from icr2_components.stores.embedding import PassageEmbedder, text_to_embed

    documents = list(corpus_source(config).documents())
    embedder = PassageEmbedder(config.embedding.model)
    direct = embedder.embed_array([text_to_embed(d, embedder.meta_fields) for d in (documents[0], documents[-1])])
    vectors = ShardVectors(out)
    np.testing.assert_allclose(np.stack([vectors.vector(ids[0]), vectors.vector(ids[-1])]), direct, atol=1e-5)
