"""``icr2 compare``'s pipeline hash covers the index a pipeline reads (config contents + the stores' retrieval
behaviour version) and the artifacts its components read (a gate's, probed heads), and leaves the hash of every
pipeline that reads neither exactly as it was (its cached answers stay)."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from icr2_components.pipeline_spec import (
    BEHAVIOUR_KEYS,
    PipelineSpec,
    artifact_paths,
    behaviour_hash,
    file_hash,
    index_configs,
)
from icr2_components.resources import shipped_file
from icr2_components.stores import retrieval_version

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "pipelines").glob("*.yaml"))


def keys_only_hash(data: dict) -> str:
    """The hash before index fingerprints: BEHAVIOUR_KEYS and metadata.context_input alone."""
    material = {key: data.get(key) for key in BEHAVIOUR_KEYS}
    material["context_input"] = (data.get("metadata") or {}).get("context_input")
    return file_hash(json.dumps(material, sort_keys=True, default=str))


@pytest.fixture
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the library's index paths are relative to the repository root, as when run there


@pytest.mark.unit
def test_index_free_library_pipelines_keep_their_hash_and_index_readers_change(in_root):
    free, readers, fitted = [], [], []
    for path in LIBRARY:
        data = yaml.safe_load(path.read_text())
        if index_configs(data):
            readers.append(path.stem)
        if artifact_paths(data):
            fitted.append(path.stem)
        if path.stem in readers or path.stem in fitted:
            assert behaviour_hash(data) != keys_only_hash(data), path.name
        else:
            free.append(path.stem)
            assert behaviour_hash(data) == keys_only_hash(data), path.name
    assert {"closed_book", "oracle"} <= set(free)
    assert {"vanilla_rag", "cmt_acd", "corpus_in_context"} <= set(readers)
    # the pipelines that read a gate artifact or probed heads
    assert set(fitted) == {"adaptive_rag", "cmt_ph3_context", "cmt_ph3_memory", "rap"}


def _adaptive_rag_with_artifact(tmp_path: Path, index: str | None = None) -> tuple[dict, Path]:
    """The shipped adaptive pipeline reading a copy of its learned gate's artifact (JSON + the .npz beside it)."""
    artifact = tmp_path / "gate.json"
    shutil.copy(shipped_file("artifacts", "adaptive_rag.learned.npz"), tmp_path / "adaptive_rag.learned.npz")
    payload = json.loads(shipped_file("artifacts", "adaptive_rag.learned").read_text())
    if index is not None:
        payload["index"] = index
    artifact.write_text(json.dumps(payload))
    data = yaml.safe_load((ROOT / "pipelines/adaptive_rag.yaml").read_text())
    data["components"]["gate"]["init_parameters"]["artifact"] = str(artifact)
    return data, artifact


@pytest.mark.unit
def test_a_retrained_gate_or_new_neighbours_change_the_hash(tmp_path, in_root):
    data, artifact = _adaptive_rag_with_artifact(tmp_path)
    assert artifact_paths(data) == [str(artifact)]
    original = behaviour_hash(data)
    assert behaviour_hash(data) == original  # stable
    # another cut (a recalibrated gate) at the same path: another hash
    payload = json.loads(artifact.read_text())
    payload["cut"] = 0.25
    artifact.write_text(json.dumps(payload))
    recalibrated = behaviour_hash(data)
    assert recalibrated != original
    # the knn gate's neighbours (the .npz it names) changed: another hash
    vectors = tmp_path / payload["vectors_file"]
    vectors.write_bytes(vectors.read_bytes() + b"\0")
    assert behaviour_hash(data) != recalibrated
    # a missing artifact is hashed by its path, without crashing (loading the pipeline says what is wrong)
    data["components"]["gate"]["init_parameters"]["artifact"] = str(tmp_path / "absent.json")
    missing = behaviour_hash(data)
    data["components"]["gate"]["init_parameters"]["artifact"] = str(tmp_path / "absent-too.json")
    assert behaviour_hash(data) != missing


@pytest.mark.unit
def test_the_index_a_gate_artifact_reads_is_part_of_the_hash(tmp_path, in_root):
    config = tmp_path / "features.yaml"
    shutil.copy(ROOT / "indexing/kilt-sample.yaml", config)
    data, _ = _adaptive_rag_with_artifact(tmp_path, index=str(config))
    before = behaviour_hash(data)
    config.write_text(config.read_text().replace("passage_words: 100", "passage_words: 50"))
    assert behaviour_hash(data) != before


@pytest.mark.unit
def test_spec_from_file_of_closed_book_has_the_keys_only_hash(in_root):
    spec = PipelineSpec.from_file("pipelines/closed_book.yaml")
    assert spec.hash == keys_only_hash(yaml.safe_load((ROOT / "pipelines/closed_book.yaml").read_text()))


def _pipeline_reading(config: str) -> dict:
    data = yaml.safe_load((ROOT / "pipelines/vanilla_rag.yaml").read_text())
    retrievers = [c for c in data["components"].values() if c["type"].endswith("IndexRetriever")]
    assert retrievers
    for component in retrievers:
        component["init_parameters"]["index"] = config
    return data


@pytest.mark.unit
def test_changing_the_index_config_contents_or_the_version_changes_the_hash(tmp_path, monkeypatch):
    config = tmp_path / "kilt-sample.yaml"
    shutil.copy(ROOT / "indexing/kilt-sample.yaml", config)
    data = _pipeline_reading(str(config))
    assert index_configs(data) == [str(config)]
    original = behaviour_hash(data)
    # a comment is not content: the same hash
    config.write_text(config.read_text() + "\n# a note\n")
    assert behaviour_hash(data) == original
    # another analyzer: other passages, another hash
    parsed = yaml.safe_load(config.read_text())
    assert parsed["store"]["analyzer"] == "english"
    parsed["store"]["analyzer"] = "standard"
    config.write_text(yaml.safe_dump(parsed))
    changed = behaviour_hash(data)
    assert changed != original
    parsed["store"]["analyzer"] = "english"
    config.write_text(yaml.safe_dump(parsed))
    assert behaviour_hash(data) == original
    # the stores' retrieval code changed (the one constant bumped): another hash
    monkeypatch.setattr(
        retrieval_version, "RETRIEVAL_BEHAVIOUR_VERSION", retrieval_version.RETRIEVAL_BEHAVIOUR_VERSION + "x"
    )
    assert behaviour_hash(data) != original


@pytest.mark.unit
def test_a_relative_config_path_is_read_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "indexing").mkdir()
    (tmp_path / "indexing/mine.yaml").write_text((ROOT / "indexing/kilt-sample.yaml").read_text())
    data = _pipeline_reading("indexing/mine.yaml")
    before = behaviour_hash(data)
    (tmp_path / "indexing/mine.yaml").write_text((ROOT / "indexing/kilt-sample.yaml").read_text()
                                                 .replace("passage_words: 100", "passage_words: 50"))
    assert behaviour_hash(data) != before


@pytest.mark.unit
def test_a_missing_or_broken_index_config_is_hashed_by_path_or_text_without_crashing(tmp_path):
    missing_a = _pipeline_reading(str(tmp_path / "absent-a.yaml"))
    missing_b = _pipeline_reading(str(tmp_path / "absent-b.yaml"))
    assert behaviour_hash(missing_a) != behaviour_hash(missing_b)
    broken = tmp_path / "broken.yaml"
    broken.write_text("store: [unclosed\n")
    data = _pipeline_reading(str(broken))
    first = behaviour_hash(data)
    broken.write_text("store: {unclosed\n")
    assert behaviour_hash(data) != first


@pytest.mark.unit
def test_an_index_retriever_without_an_index_parameter_reads_the_default_config(in_root):
    data = _pipeline_reading("indexing/kilt-sample.yaml")
    for component in data["components"].values():
        if component["type"].endswith("IndexRetriever"):
            del component["init_parameters"]["index"]
    assert index_configs(data) == ["kilt-sample"]  # IndexRetriever's default: the shipped config, by name
    assert behaviour_hash(data) != keys_only_hash(data)


def test_an_elasticsearch_index_name_is_not_an_index_config():
    data = {"components": {"writer": {"type": "icr2_components.stores.elasticsearch.writer.ElasticsearchWriter",
                                      "init_parameters": {"index": "icr2-kilt"}}}}
    assert index_configs(data) == []
    assert behaviour_hash(data) == keys_only_hash(data)
