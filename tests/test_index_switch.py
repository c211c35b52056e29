"""The index switch (ICR2_INDEX_CONFIG, `--index CONFIG` on compare / serve / quickstart): the whole pipeline
library on another index config without editing a YAML; without the switch, exactly the pipelines of today."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from icr2_components.cli import main
from icr2_components.pipeline_loading import PipelineLoadError, load_pipeline
from icr2_components.pipeline_spec import PipelineSpec, behaviour_hash
from icr2_components.resources import shipped_file
from icr2_components.stores.index_switch import (
    INDEX_CONFIG_ENV,
    IndexSwitchError,
    apply_index_switch,
    index_switch_set,
    switched_index,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
# fine_tuned_reader's reader needs a model trained first (icr2 train): its YAML is checked, not loaded
NEEDS_TRAINING = {"fine_tuned_reader.yaml"}
PIPELINES = sorted((REPO_ROOT / "pipelines").glob("*.yaml"))
ES_CONFIG = "indexing/kilt-sample-elasticsearch.yaml"


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv(INDEX_CONFIG_ENV, raising=False)


def retriever_indexes(pipeline) -> dict[str, str]:
    return {
        name: component.index for name, component in pipeline.walk() if type(component).__name__ == "IndexRetriever"
    }


def yaml_indexes(path: Path) -> dict[str, str]:
    data = yaml.safe_load(path.read_text())
    return {
        name: c["init_parameters"]["index"]
        for name, c in data["components"].items()
        if c["type"].endswith("IndexRetriever")
    }


@pytest.mark.unit
def test_every_library_pipeline_names_the_sample_index_and_loads_unchanged_without_the_switch():
    switched_somewhere = 0
    for path in PIPELINES:
        data = yaml.safe_load(path.read_text())
        assert apply_index_switch(data) == (data, [])
        if path.name in NEEDS_TRAINING:
            continue
        assert retriever_indexes(load_pipeline(path)) == yaml_indexes(path)
        if "inputs" in data:  # the comparable ones (the cic_benchmark_* builders declare none)
            spec = PipelineSpec.from_file(str(path))
            assert spec.hash == behaviour_hash(data), path.name  # compare's cache keys are today's
            assert spec.text == path.read_text()
            assert retriever_indexes(spec.pipeline(controlled=False)) == yaml_indexes(path)
        switched_somewhere += bool(yaml_indexes(path))
    assert switched_somewhere >= 20  # the library's retrieving pipelines (22 today)


@pytest.mark.parametrize(
    "same", ["kilt-sample", "indexing/kilt-sample.yaml", str(shipped_file("indexing", "kilt-sample"))]
)
@pytest.mark.unit
def test_a_switch_to_the_same_file_changes_nothing(monkeypatch, same):
    path = REPO_ROOT / "pipelines" / "corpus_in_context.yaml"
    before = PipelineSpec.from_file(str(path))
    monkeypatch.setenv(INDEX_CONFIG_ENV, same)
    after = PipelineSpec.from_file(str(path))
    assert after.hash == before.hash and after.text == before.text
    assert load_pipeline(path).to_dict() == before.pipeline(controlled=False).to_dict()


@pytest.mark.parametrize("name", ["vanilla_rag", "corpus_in_context", "adaptive_rag", "rap"])
@pytest.mark.unit
def test_the_switch_points_every_retriever_at_the_other_config_and_changes_the_hash(monkeypatch, name):
    path = REPO_ROOT / "pipelines" / f"{name}.yaml"
    before = PipelineSpec.from_file(str(path))
    monkeypatch.setenv(INDEX_CONFIG_ENV, ES_CONFIG)
    spec = PipelineSpec.from_file(str(path))
    assert set(retriever_indexes(spec.pipeline(controlled=False)).values()) == {ES_CONFIG}
    assert spec.hash != before.hash  # answers from the two indexes never share a cache entry
    assert ES_CONFIG in spec.text and "index: kilt-sample\n" not in spec.text
    # a pipeline loaded anywhere else follows the variable too (the component honours it)
    assert set(retriever_indexes(load_pipeline(path)).values()) == {ES_CONFIG}
    # and the pipeline serialises with the index it runs on
    dumped = load_pipeline(path).to_dict()
    assert {
        c["init_parameters"]["index"] for c in dumped["components"].values() if c["type"].endswith("IndexRetriever")
    } == {ES_CONFIG}


def test_apply_index_switch_reports_each_change_and_leaves_other_components_alone():
    data = yaml.safe_load((REPO_ROOT / "pipelines" / "corpus_in_context.yaml").read_text())
    switched, changes = apply_index_switch(data, ES_CONFIG)
    assert changes == [f"bm25_retriever.index kilt-sample -> {ES_CONFIG}",
                       f"dense_retriever.index kilt-sample -> {ES_CONFIG}"]
    assert switched["components"]["corpus"] == data["components"]["corpus"]
    assert data["components"]["bm25_retriever"]["init_parameters"]["index"] == "kilt-sample"  # a copy
    closed_book = yaml.safe_load((REPO_ROOT / "pipelines" / "closed_book.yaml").read_text())
    assert apply_index_switch(closed_book, ES_CONFIG) == (closed_book, [])
    assert apply_index_switch(data) == (data, [])  # no switch set
    assert switched_index("indexing/kilt-sample.yaml") == "indexing/kilt-sample.yaml"
    assert switched_index("kilt-sample", "indexing/kilt-sample.yaml") == "kilt-sample"  # a name and its file: the same
    assert switched_index("kilt-sample", "kilt-sample-elasticsearch") == "kilt-sample-elasticsearch"


@pytest.mark.unit
def test_a_switch_naming_no_file_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(INDEX_CONFIG_ENV, "indexing/nope.yaml")
    with pytest.raises(PipelineLoadError) as raised:
        load_pipeline(REPO_ROOT / "pipelines" / "vanilla_rag.yaml")
    message = str(raised.value)
    assert (
        "component 'retriever'" in message and f"{INDEX_CONFIG_ENV}=indexing/nope.yaml: no such index config" in message
    )
    assert "\n" not in message
    with pytest.raises(IndexSwitchError, match=r"^--index indexing/nope.yaml: no such index config"), \
            index_switch_set("indexing/nope.yaml"):
        pass


@pytest.mark.unit
def test_index_switch_set_restores_the_variable(monkeypatch):
    monkeypatch.setenv(INDEX_CONFIG_ENV, "indexing/kilt-sample.yaml")
    with index_switch_set(ES_CONFIG) as switch:
        assert switch == ES_CONFIG and os.environ[INDEX_CONFIG_ENV] == ES_CONFIG
    assert os.environ[INDEX_CONFIG_ENV] == "indexing/kilt-sample.yaml"
    with index_switch_set(None) as switch:
        assert switch == "indexing/kilt-sample.yaml"


@pytest.mark.parametrize("command", [["compare", "--pipelines", "pipelines/vanilla_rag.yaml"],
                                     ["serve", "pipelines/vanilla_rag.yaml"],
                                     ["quickstart"]])
def test_compare_serve_and_quickstart_take_index_and_refuse_a_missing_config_in_one_line(command, capsys):
    assert main([*command, "--index", "indexing/nope.yaml"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.endswith("--index indexing/nope.yaml: no such index config; pass an index config file or a shipped "
                          "name (kilt-full-elasticsearch, kilt-sample, kilt-sample-elasticsearch, python-docs).")
    assert "\n" not in error
    assert INDEX_CONFIG_ENV not in os.environ


@pytest.mark.unit
def test_quickstart_writes_its_pipeline_copies_with_the_switched_index(monkeypatch, tmp_path):
    from icr2_components.commands.quickstart import write_variants

    monkeypatch.setenv(INDEX_CONFIG_ENV, ES_CONFIG)
    [vanilla, closed] = write_variants(["vanilla_rag", "closed_book"], REPO_ROOT / "pipelines", tmp_path, top_k=3)
    text = Path(vanilla).read_text()
    assert f"retriever.index kilt-sample -> {ES_CONFIG}" in text.splitlines()[0]
    assert yaml.safe_load(text)["components"]["retriever"]["init_parameters"]["index"] == ES_CONFIG
    assert "index" not in Path(closed).read_text().splitlines()[0]
