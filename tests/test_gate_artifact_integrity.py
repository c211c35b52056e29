"""A learned gate's ``.npz`` must agree with its ``.json``: the shipped knn gate (346 questions, MiniLM vectors) copied
beside a tampered ``.npz`` is refused at load, naming both files and what differs, for each way the file can
disagree (too few rows, its labels flipped, random vectors, vectors cut to 100 dimensions); an artifact written
before it recorded its vectors is still checked by its counts, and its vectors' dimensions are checked against
the embedding model before any score (not numpy's matmul message). The shipped artifact scores as before."""

import json
import logging
import shutil

import numpy as np
import pytest

from icr2_components.artifacts.gate_artifact import GateArtifact, file_sha256
from icr2_components.gates.deciders.learned import LearnedGateModel, knn_probabilities
from icr2_components.resources import shipped_file

QUESTIONS = ["who won the nobel prize in physics in 1901", "what is the latest version of android released this year"]


@pytest.fixture(scope="module")
def shipped():
    json_path = shipped_file("artifacts", "adaptive_rag.learned")
    with np.load(json_path.parent / "adaptive_rag.learned.npz", allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    return json_path, arrays


def tampered(tmp_path, shipped, record: bool = True, **arrays):
    """The shipped JSON (without its vectors_record when ``record`` is False) beside an ``.npz`` of ``arrays``."""
    json_path, original = shipped
    payload = json.loads(json_path.read_text())
    if not record:
        payload.pop("vectors_record")
    target = tmp_path / "adaptive_rag.learned.json"
    target.write_text(json.dumps(payload))
    np.savez(tmp_path / "adaptive_rag.learned.npz", **{**original, **arrays})
    return target


def refusal(path) -> str:
    with pytest.raises(ValueError) as caught:
        GateArtifact.load(path).knn_vectors(path)
    message = str(caught.value)
    assert message.startswith(f"The knn gate's vectors file {path.with_suffix('.npz')} disagrees with {path}: ")
    assert message.endswith("Train the gate again with icr2 train-gate (it writes both files together).")
    return message


@pytest.mark.unit
def test_the_shipped_artifact_records_its_vectors_and_reads_them_unchanged(shipped):
    json_path, arrays = shipped
    artifact = GateArtifact.load(json_path)
    assert artifact.vectors_record == {"sha256": file_sha256(json_path.parent / "adaptive_rag.learned.npz"),
                                       "rows": 346, "dims": 384, "needs_retrieval": 85}
    vectors, labels = artifact.knn_vectors(json_path)
    assert np.array_equal(vectors, arrays["vectors"].astype(np.float64))
    assert np.array_equal(labels, arrays["labels"].astype(np.float64))


@pytest.mark.unit
def test_ten_vector_rows_against_346_labels_are_refused(tmp_path, shipped):
    vectors = shipped[1]["vectors"]
    assert "holds 10 vector rows against 346 labels" in refusal(tampered(tmp_path, shipped, vectors=vectors[:10]))
    cut = tampered(tmp_path, shipped, vectors=vectors[:10], labels=shipped[1]["labels"][:10])
    assert "holds 10 vectors, the artifact was trained on 346 questions" in refusal(cut)


@pytest.mark.unit
def test_flipped_labels_are_refused_with_or_without_the_record(tmp_path, shipped):
    flipped = 1.0 - shipped[1]["labels"]
    expected = "261 of its labels say 'needs retrieval', the artifact's training counted 85"
    assert expected in refusal(tampered(tmp_path, shipped, labels=flipped))
    assert expected in refusal(tampered(tmp_path, shipped, record=False, labels=flipped))
    halves = shipped[1]["labels"] * 0.5
    assert "its labels are not all 0 or 1" in refusal(tampered(tmp_path, shipped, labels=halves))


@pytest.mark.unit
def test_random_vectors_of_the_same_shape_are_refused_by_the_recorded_sha256(tmp_path, shipped):
    noise = np.random.default_rng(0).standard_normal(shipped[1]["vectors"].shape).astype(np.float32)
    message = refusal(tampered(tmp_path, shipped, vectors=noise))
    assert "the artifact records 4d756ab5b0ad3b94..." in message and "changed or replaced after training" in message


def test_vectors_cut_to_100_dimensions_are_refused_at_load_or_before_scoring(tmp_path, shipped, minilm, caplog):
    cut = shipped[1]["vectors"][:, :100]
    message = refusal(tampered(tmp_path, shipped, vectors=cut))
    assert "its vectors are 346 x 100, the artifact records 346 x 384" in message
    # an artifact from before the record: read with a warning, then refused before any score (no matmul message)
    old = tampered(tmp_path, shipped, record=False, vectors=cut)
    with caplog.at_level(logging.WARNING, logger="icr2_components.artifacts.gate_artifact"):
        model = LearnedGateModel(str(old), device="cpu")
    assert "records no vectors_record" in caplog.text and "checked by its counts only" in caplog.text
    with pytest.raises(ValueError, match=r"have 100 dimensions, but all-minilm-l6-v2 embeds questions in 384: the "
                                         r"vectors are not this artifact's"):
        model.probabilities(QUESTIONS)


def test_the_shipped_gate_scores_with_its_own_vectors(tmp_path, shipped, minilm):
    json_path, arrays = shipped
    model = LearnedGateModel(str(json_path), device="cpu")
    expected = knn_probabilities(model.features.embed(QUESTIONS), arrays["vectors"].astype(np.float64),
                                 arrays["labels"].astype(np.float64), 10)
    assert np.array_equal(model.probabilities(QUESTIONS), expected)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("adaptive_rag.learned.json", "adaptive_rag.learned.npz"):
        shutil.copy(json_path.parent / name, copy / name)
    assert np.array_equal(LearnedGateModel(str(copy / "adaptive_rag.learned.json"), device="cpu")
                          .probabilities(QUESTIONS), expected)
