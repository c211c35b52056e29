"""PH3 probing on real conflicting NQ contexts with SmolLM2: the artifact, and suppression moving the answer."""

from pathlib import Path

import pytest

from icr2_components.cmt.ph3_artifact import PH3HeadArtifact
from icr2_components.cmt.ph3_probing import first_answer_token, head_direct_effects, ph3_instances, probe_ph3_heads
from icr2_components.models.head_suppression import suppress_heads

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def probed(smollm2, sample_files):
    model, tokenizer = smollm2
    instances, skips = ph3_instances(sample_files.tasks, limit=3)
    return instances, probe_ph3_heads(model, tokenizer, instances, "smollm2-135m-instruct", rank=16, skips=skips)


def test_probing_writes_an_artifact_that_round_trips(probed, tmp_path):
    instances, artifact = probed
    assert artifact.instances + artifact.skipped["total"] == len(instances)
    assert len(artifact.scores) == 30 and len(artifact.scores[0]) == 9
    assert artifact.context_heads and artifact.memory_heads
    assert all(artifact.scores[l][h] > 0 for l, h in artifact.context_heads)
    assert all(artifact.scores[l][h] < 0 for l, h in artifact.memory_heads)
    again = PH3HeadArtifact.load(artifact.save(tmp_path / "ph3.json"))
    assert again == artifact
    assert again.heads_to_suppress("context", 2) == [tuple(h) for h in artifact.memory_heads[:2]]
    with pytest.raises(ValueError, match="count must be between"):
        again.heads_to_suppress("memory", 10_000)


def test_suppressing_context_heads_moves_the_logits_toward_memory(probed, smollm2):
    """The direct effects are a linearisation; the real, whole-model effect must agree in sign."""
    from icr2_components.builders.templates import render_cic_prompt
    from icr2_components.readers.local_chat_reader import messages_to_dicts

    model, tokenizer = smollm2
    instances, artifact = probed
    instance = instances[0]
    target, foil = first_answer_token(tokenizer, instance.context_answer), first_answer_token(tokenizer, instance.memory_answer)
    messages = render_cic_prompt("qa", instance.query, instance.documents).messages
    ids = tokenizer.apply_chat_template(messages_to_dicts(messages), add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    import torch

    def margin(heads):
        with torch.inference_mode(), suppress_heads(model, heads):
            logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1]
        return float(logits[target] - logits[foil])

    base = margin([])
    assert margin(artifact.heads_to_suppress("memory", 8)) < base  # context heads removed: less context
    effects = head_direct_effects(model, ids, target, foil)
    assert effects.shape == (30, 9)


def test_bundled_artifact_loads_and_matches_smollm2(smollm2):
    from icr2_components.filters.passage_scoring import model_signature

    model, _ = smollm2
    artifact = PH3HeadArtifact.load(ROOT / "bench/results/ph3_heads_smollm2.json")
    artifact.check_model("smollm2-135m-instruct", model_signature(model))
    with pytest.raises(FileNotFoundError, match="probe_ph3_heads"):
        PH3HeadArtifact.load(ROOT / "bench/results/no_such_ph3.json")


@pytest.mark.parametrize("name", ["cmt_ph3_context", "cmt_ph3_memory"])
def test_ph3_pipeline_loads_from_yaml_and_answers(name, probed, monkeypatch):
    from icr2_components.evaluation.pipeline_spec import PipelineSpec

    monkeypatch.chdir(ROOT)  # the artifact path in the YAML is relative to the repository
    instances, _ = probed
    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / f"{name}.yaml"))
    result = spec.run(instances[0].query, instances[0].documents, controlled=True, max_new_tokens=4)
    assert result["answer"].strip()
