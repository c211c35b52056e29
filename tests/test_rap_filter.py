"""RAP on the real SmolLM2 and NQ-sample CiC instances: probed heads beat chance on held-apart instances, and
the RetrievalAttentionFilter (component, YAML, bad input) built on them.

The CiC instances are built here from the bundled NQ sample (gold passage + BM25 confounders assembled by
ConfounderAwareCorpusBuilder, 4 passages each) because `icr2 build-benchmark` had not landed when this was
written; the instances are of the same kind.
"""

import dataclasses

import pytest
from haystack import Document

from icr2_components.artifacts.base import ArtifactMismatchError
from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.errors import ContextTooLongError
from icr2_components.filters import RetrievalAttentionFilter
from icr2_components.filters.probing.head_probing import probe_heads, split_instances
from icr2_components.filters.probing.probing_job import probe_to_artifact
from icr2_components.training.sample_data import nq_sample_instances

PASSAGES = 4
Q = 4
# Generated-token queries with mean aggregation separate gold from confounders best on SmolLM2 (see
# docs/benchmarks/rap-and-heads.md); the last prompt token alone is weaker on a 135M model.
MODE, AGGREGATE, GENERATED = "generated_tokens", "mean", 4


@pytest.fixture(scope="module")
def split(sample_files):
    instances = nq_sample_instances(20, passages=PASSAGES)
    return split_instances(instances, 10, seed=0)


@pytest.fixture(scope="module")
def artifact_path(split, smollm2, tmp_path_factory):
    probe, _ = split
    path = tmp_path_factory.mktemp("rap") / "heads.json"
    probe_to_artifact(probe, "smollm2-135m-instruct", m=1, q=Q, max_m=2, query_position_mode=MODE, aggregate=AGGREGATE,
                      dtype="float32", device="cpu", generation_tokens=GENERATED, artifact_path=path, progress=False)
    return path


def test_probed_heads_beat_chance_on_held_apart_instances(split, artifact_path, smollm2):
    probe, held = split
    assert not {i.id for i in probe} & {i.id for i in held}
    artifact = RetrievalHeadArtifact.load(artifact_path)
    model, tokenizer = smollm2
    held_result = probe_heads(model, tokenizer, held, max_m=1, query_position_mode=MODE, aggregate=AGGREGATE,
                              generation_tokens=GENERATED, progress=False)
    chance = held_result.chance[0]
    assert chance == pytest.approx(1 / PASSAGES)
    held_rates = [float(held_result.hit_rates[0, layer, head]) for layer, head in artifact.top_heads()]
    # The selected heads, scored only on instances they were not selected on, find the gold passage at least
    # 0.2 more often than a random pick (0.25 with 4 passages).
    assert sum(held_rates) / Q >= chance + 0.2, held_rates
    assert max(held_rates) >= chance + 0.25, held_rates


def test_filter_keeps_each_heads_top_m_with_scores_in_meta(split, artifact_path, smollm2):
    _, held = split
    rap = RetrievalAttentionFilter(artifact=str(artifact_path), top_m=1, dtype="float32", device="cpu")
    instance = held[0]
    result = rap.run(documents=instance.documents, query=instance.query)
    kept, report = result["documents"], result["report"]
    assert 1 <= len(kept) <= Q
    assert report["passages_in"] == PASSAGES and report["passages_out"] == len(kept) and not report["m_clamped"]
    positions = [instance.documents.index(next(d for d in instance.documents if d.id == k.id)) for k in kept]
    assert positions == sorted(positions)  # input order is kept
    heads = report["heads"]
    for document in kept:
        assert set(document.meta["rap_head_scores"]) == set(heads)
        assert document.meta["rap_score"] == pytest.approx(sum(document.meta["rap_head_scores"].values()))
        for head in document.meta["rap_selected_by"]:
            # a head chose this passage, so no passage outscores it for that head
            assert all(document.meta["rap_head_scores"][head] >= other.meta["rap_head_scores"][head] for other in kept)
    assert sorted({h for d in kept for h in d.meta["rap_selected_by"]}) == sorted(heads)
    assert "rap_score" not in (instance.documents[0].meta or {})  # inputs are not mutated
    # Run-time overrides: more heads and M=2 keep at least as much.
    wider = rap.run(documents=instance.documents, query=instance.query, top_m=2, num_heads=Q)["documents"]
    assert {d.id for d in kept} <= {d.id for d in wider}


def test_filter_round_trips_and_shares_the_readers_model(artifact_path, smollm2):
    from haystack.core.serialization import component_from_dict, component_to_dict

    from icr2_components.readers import LocalChatReader

    rap = RetrievalAttentionFilter(artifact=str(artifact_path), top_m=2, num_heads=3, dtype="float32", device="cpu")
    data = component_to_dict(rap, "rap_filter")  # Haystack's default serialisation: the init parameters as given
    again = component_from_dict(RetrievalAttentionFilter, data, "rap_filter")
    # model=None: the artifact's model, read at warm_up (the artifact is not read before)
    assert component_to_dict(again, "rap_filter") == data and data["init_parameters"]["model"] is None
    assert again._artifact is None
    reader = LocalChatReader(model="smollm2-135m-instruct", dtype="float32", device="cpu")
    again.warm_up()
    reader.warm_up()
    assert again._reader(again._artifact) == "smollm2-135m-instruct"
    assert again._model is reader.chat_model.model is smollm2[0]
    assert component_to_dict(again, "rap_filter") == data  # warming up changes no init parameter


def test_rap_yaml_pipeline_loads_and_runs_filter_to_reader(artifact_path, split, smollm2, tmp_path, monkeypatch):
    from pathlib import Path

    from icr2_components.pipeline_loading import load_pipeline, loads_pipeline

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)  # the artifact and index paths in the YAML are relative to the repository
    committed = root / "bench/results/rap_heads_smollm2.json"
    assert committed.exists(), "the committed RAP head artifact (bench/rap.py) is missing"
    pipeline = load_pipeline(root / "pipelines/rap.yaml")
    names = set(pipeline.graph.nodes)
    assert {"bm25_retriever", "dense_retriever", "corpus", "rap_filter", "prompt", "reader"} <= names
    connections = {(c["sender"], c["receiver"]) for c in pipeline.to_dict()["connections"]}
    assert {("corpus.documents", "rap_filter.documents"), ("rap_filter.documents", "prompt.documents"),
            ("prompt.prompt", "reader.messages")} <= connections  # the filter sits between the CiC and the reader
    rap, reader = pipeline.get_component("rap_filter"), pipeline.get_component("reader")
    assert rap.model == reader.model and rap.artifact == "rap_heads_smollm2"  # the shipped artifact, by name
    rap.warm_up()  # the committed artifact matches the reader's model (a mismatch raises ArtifactMismatchError)
    reader.warm_up()
    assert rap._model is reader.chat_model.model is smollm2[0]
    # The filter -> prompt -> reader part of the same YAML, on a held-apart CiC (retrieval needs the index).
    text = (root / "pipelines/rap.yaml").read_text()
    text = text.replace("artifact: rap_heads_smollm2", f"artifact: {artifact_path}")
    section = _filter_to_reader(text)
    small = loads_pipeline(section)
    instance = split[1][1]
    result = small.run({"rap_filter": {"documents": instance.documents, "query": instance.query},
                        "prompt": {"query": instance.query}}, include_outputs_from={"rap_filter", "prompt"})
    kept = result["rap_filter"]["documents"]
    assert 1 <= len(kept) < PASSAGES  # 4 heads x top-1 over 4 passages: at least one passage is dropped here
    standalone = RetrievalAttentionFilter(
        artifact=str(artifact_path), top_m=1, num_heads=4, dtype="float32", device="cpu"
    )
    assert [d.id for d in kept] == [
        d.id for d in standalone.run(documents=instance.documents, query=instance.query)["documents"]
    ]
    prompt = result["prompt"]["prompt"][-1].text
    kept_ids = {d.id for d in kept}
    for document in instance.documents:  # the reader sees exactly the kept passages
        assert (document.content in prompt) == (document.id in kept_ids), document.id
    reply = result["reader"]["replies"][0]
    assert reply.text and 0 < reply.meta["completion_tokens"] <= 32
    small_reader = small.get_component("reader")
    full_prompt_tokens = small_reader.chat_model.encode(
        loads_pipeline(section)
        .get_component("prompt")
        .run(documents=instance.documents, query=instance.query)["prompt"],
        small_reader.max_new_tokens,
    )["input_ids"].shape[1]
    assert reply.meta["prompt_tokens"] < full_prompt_tokens  # filtering shortened what the reader read
    assert small.get_component("rap_filter")._model is small_reader.chat_model.model


def _filter_to_reader(yaml_text: str) -> str:
    import yaml

    data = yaml.safe_load(yaml_text)
    keep = ("rap_filter", "prompt", "reader")
    data["components"] = {name: data["components"][name] for name in keep}
    data["connections"] = [
        c for c in data["connections"] if c["sender"].split(".")[0] in keep and c["receiver"].split(".")[0] in keep
    ]
    for key in ("inputs", "outputs", "metadata"):
        data.pop(key, None)
    return yaml.safe_dump(data)


def test_artifact_for_another_model_is_refused(tmp_path, smollm2):
    # The committed SmolLM2 artifact (bench/rap.py) relabelled as probed on Qwen2-0.5B (24 layers x 14 heads).
    artifact = RetrievalHeadArtifact.load("bench/results/rap_heads_smollm2.json")
    ranking = [head for head in artifact.ranking if head[0] < 24]
    foreign = dataclasses.replace(
        artifact,
        model="Qwen/Qwen2-0.5B-Instruct",
        ranking=ranking,
        heads=ranking[: artifact.q],
        model_signature=dict(artifact.model_signature, architecture="Qwen2ForCausalLM", num_layers=24, num_heads=14),
    )
    path = foreign.save(tmp_path / "qwen.json")
    with pytest.raises(
        ArtifactMismatchError, match=r"probed on Qwen/Qwen2-0.5B-Instruct .* reader is smollm2-135m-instruct"
    ):
        RetrievalAttentionFilter(
            artifact=str(path), model="smollm2-135m-instruct", dtype="float32", device="cpu"
        ).warm_up()


def test_passages_beyond_the_context_window_name_the_limit(artifact_path, split):
    rap = RetrievalAttentionFilter(artifact=str(artifact_path), max_context_tokens=300, dtype="float32", device="cpu")
    instance = split[1][0]
    with pytest.raises(ContextTooLongError, match=r"takes at most 300 tokens"):
        rap.run(documents=instance.documents, query=instance.query)


def test_no_passages_and_m_beyond_the_passages_are_reported(artifact_path, split):
    rap = RetrievalAttentionFilter(artifact=str(artifact_path), dtype="float32", device="cpu")
    empty = rap.run(documents=[], query="who wrote hamlet")
    assert empty["documents"] == [] and empty["report"]["empty_input"] and empty["report"]["passages_out"] == 0
    instance = split[1][2]
    two = instance.documents[:2]
    result = rap.run(documents=two, query=instance.query, top_m=5)
    assert result["report"]["m_clamped"] and result["report"]["top_m"] == 5
    assert [d.id for d in result["documents"]] == [d.id for d in two]


def test_bad_parameters_say_what_to_do(artifact_path, tmp_path):
    # The artifact is read at warm_up (moved there from __init__): building touches nothing on disk, and what
    # needs the file or its content is refused at warm_up, before any model is loaded.
    missing = RetrievalAttentionFilter(artifact=str(tmp_path / "none.json"))
    with pytest.raises(FileNotFoundError, match="icr2 probe-heads"):
        missing.warm_up()
    with pytest.raises(ValueError, match="top_m"):
        RetrievalAttentionFilter(artifact=str(artifact_path), top_m=0)
    with pytest.raises(ValueError, match="probe again with a larger --rank"):
        RetrievalAttentionFilter(artifact=str(artifact_path), num_heads=500).warm_up()
    with pytest.raises(ValueError, match="not a retrieval-head artifact"):
        (tmp_path / "x.json").write_text('{"format": "other"}')
        RetrievalAttentionFilter(artifact=str(tmp_path / "x.json")).warm_up()
    with pytest.raises(ValueError, match="not a retrieval-head artifact"):  # a run without warm_up reads it too
        RetrievalAttentionFilter(artifact=str(tmp_path / "x.json")).run(documents=[], query="q")


def test_documents_without_text_are_an_error_not_a_silent_drop(artifact_path):
    rap = RetrievalAttentionFilter(artifact=str(artifact_path), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="has no text"):
        rap.run(documents=[Document(content="Paris is in France."), Document(content=None)], query="where is paris")
