"""Files the loading side writes and reads back prove they are whole: an edited, cut or self-contradicting file is
a clear error naming the file and what disagrees, never used as it is.

- the Elasticsearch writer's checkpoint (content hash; ``written + failed == position``);
- a training run's ``training_ids.json`` (the hashes of its id lists);
- ``icr2 embed`` shards (the manifest's own hash, each shard file's hash).
"""

from __future__ import annotations

import json
from itertools import islice

import numpy as np
import pytest

from icr2_components.artifacts.training_ids import TrainingIdsError, read_training_ids, write_training_ids
from icr2_components.stores.elasticsearch.writer import (
    CheckpointMismatchError,
    ElasticsearchStreamingWriter,
    StreamingWriterSettings,
)


def _writer(path) -> ElasticsearchStreamingWriter:
    # nothing here talks to a node: only the checkpoint file is written and read
    return ElasticsearchStreamingWriter("http://127.0.0.1:9", "any", StreamingWriterSettings(checkpoint_path=path))


def _state(position=700, written=690, failed=10):
    return {"version": 2, "index": "any", "url": "u", "fingerprint": "f", "position": position, "written": written,
            "failed": failed, "last_id": "90000001-w100-00003", "failure_examples": [], "completed": False}


@pytest.mark.unit
def test_a_checkpoint_edited_cut_or_contradicting_itself_is_named_not_resumed(tmp_path):
    path = tmp_path / "checkpoints" / "load.json"  # its folder does not exist yet
    writer = _writer(path)
    writer._write_checkpoint(_state())
    assert writer.read_checkpoint()["position"] == 700
    assert oct(path.stat().st_mode & 0o777) == "0o644" and not list(path.parent.glob("*.tmp"))

    text = path.read_text()
    path.write_text(text.replace('"position": 700', '"position": 7000'))
    with pytest.raises(CheckpointMismatchError, match=rf"{path}.*does not match the content hash"):
        writer.read_checkpoint()
    path.write_text(text[: len(text) // 2])  # cut
    with pytest.raises(CheckpointMismatchError, match=rf"{path} cannot be read"):
        writer.read_checkpoint()
    writer._write_checkpoint(_state(position=700, written=700, failed=10))  # sealed, but its counts disagree
    with pytest.raises(CheckpointMismatchError, match="position 700 should be written 700 \\+ failed 10"):
        writer.read_checkpoint()


@pytest.mark.unit
def test_training_ids_whose_lists_do_not_match_their_hashes_are_refused(tmp_path):
    path = write_training_ids(tmp_path, ["q1", "q2", "q3"], ["q4"], method="rta", model="m")
    assert read_training_ids(path).train_ids == ("q1", "q2", "q3")
    data = json.loads(path.read_text())
    data["train_ids"] = ["q1", "q2"]  # one id removed by hand
    path.write_text(json.dumps(data))
    with pytest.raises(TrainingIdsError, match=rf"{path}: train_ids \(2 ids\) do not match the train_ids_sha256"):
        read_training_ids(path)


@pytest.mark.slow
def test_embedding_shards_whose_files_or_manifest_changed_are_named(tmp_path):
    from icr2_components.stores import load_index_config
    from icr2_components.stores.embedding_shards import (
        ShardsMismatchError,
        ShardVectors,
        corpus_source,
        embed_to_shards,
        read_manifest,
    )

    config = load_index_config("indexing/kilt-sample.yaml", overrides={"corpus.max_articles": 6})
    out = tmp_path / "vectors"
    report = embed_to_shards(config, out, shard_size=8, progress=False)
    assert report.complete and report.shards_total >= 2
    first_id = next(islice(corpus_source(config).documents(), 1)).id
    assert ShardVectors(out).vector(first_id).shape == (384,)

    vectors = np.load(out / "shard-00000.npy")
    vectors[0] = -vectors[0]  # another vector, same shape
    np.save(out / "shard-00000.npy", vectors)
    with pytest.raises(ShardsMismatchError, match=rf"{out / 'shard-00000.npy'} does not match the SHA-256"):
        ShardVectors(out).vector(first_id)

    manifest = json.loads((out / "manifest.json").read_text())
    manifest["passages"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardsMismatchError, match=rf"{out / 'manifest.json'} does not match the content hash"):
        read_manifest(out)
    # a file where --out should be a folder fails before any embedding
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="a_file is a file, not a folder"):
        embed_to_shards(config, tmp_path / "a_file", progress=False)
