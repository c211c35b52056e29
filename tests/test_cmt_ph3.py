"""PH3 probing on real conflicting NQ contexts with SmolLM2: the artifact, and suppression moving the answer."""

from pathlib import Path

import pytest

from icr2_components.artifacts.ph3_heads import PH3HeadArtifact
from icr2_components.filters.probing.ph3_probing import (
    first_answer_token,
    head_direct_effects,
    ph3_instances,
    probe_ph3_heads,
)
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
    # the questions it was probed on, in order (icr2 compare leaves them out)
    assert len(artifact.probed_ids) == artifact.instances
    assert artifact.probed_ids == [i.id for i in instances if i.id in set(artifact.probed_ids)]
    assert len(artifact.scores) == 30 and len(artifact.scores[0]) == 9
    assert artifact.context_heads and artifact.memory_heads
    assert all(artifact.scores[layer][h] > 0 for layer, h in artifact.context_heads)
    assert all(artifact.scores[layer][h] < 0 for layer, h in artifact.memory_heads)
    again = PH3HeadArtifact.load(artifact.save(tmp_path / "ph3.json"))
    assert again == artifact
    assert again.heads_to_suppress("context", 2) == [tuple(h) for h in artifact.memory_heads[:2]]
    with pytest.raises(ValueError, match="count must be between"):
        again.heads_to_suppress("memory", 10_000)


def test_suppressing_context_heads_moves_the_logits_toward_memory(probed, smollm2):
    """The direct effects are a linearisation; the real, whole-model effect must agree in sign."""
    from icr2_components.models.chat_messages import messages_to_dicts
    from icr2_components.text.templates import render_cic_prompt

    model, tokenizer = smollm2
    instances, artifact = probed
    instance = instances[0]
    target, foil = (
        first_answer_token(tokenizer, instance.context_answer),
        first_answer_token(tokenizer, instance.memory_answer),
    )
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
    from icr2_components.models.introspection import model_signature

    model, _ = smollm2
    artifact = PH3HeadArtifact.load(ROOT / "bench/results/ph3_heads_smollm2.json")
    artifact.check_model("smollm2-135m-instruct", model_signature(model))
    with pytest.raises(FileNotFoundError, match="probe_ph3_heads"):
        PH3HeadArtifact.load(ROOT / "bench/results/no_such_ph3.json")


def _run_watching_heads(model, spec, instance):
    """Run the pipeline; return its result, the (layer, head) outputs that were exactly zero in every forward pass
    (read at each o_proj input, not through the suppression code) and the first generated step's logits."""
    import torch

    heads, head_dim = model.config.num_attention_heads, model.config.head_dim
    active, first = set(), {}

    def watch(layer):
        def hook(_module, args):
            x = args[0][0].reshape(args[0].shape[1], heads, head_dim)
            active.update((layer, h) for h in range(heads) if bool(x[:, h].abs().sum() > 0))
        return hook

    def keep_first_logits(_module, _args, output):
        first.setdefault("logits", output[0, -1].detach().clone())  # returns None: the output is left as it is

    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(watch(i)) for i, layer in enumerate(model.model.layers)]
    hooks.append(model.lm_head.register_forward_hook(keep_first_logits))
    try:
        result = spec.run(instance.query, instance.documents, controlled=True, max_new_tokens=4)
    finally:
        for hook in hooks:
            hook.remove()
    everything = {(layer, h) for layer in range(model.config.num_hidden_layers) for h in range(heads)}
    return result, sorted(everything - active), first["logits"].to(torch.float32)


def test_ph3_pipelines_load_from_yaml_suppress_their_heads_and_pull_apart(probed, smollm2, monkeypatch):
    """PH3 +context suppresses the bundled artifact's top memory heads, PH3 +memory its top context heads (exactly
    those outputs are zero while the YAML pipeline generates, and only during the call); and on each real
    conflicting instance the +context variant favours the context's answer over the memory answer more than
    the +memory variant does (first-token logit margin)."""
    from icr2_components.pipeline_spec import PipelineSpec

    monkeypatch.chdir(ROOT)  # the artifact path in the YAML is relative to the repository
    model, tokenizer = smollm2
    instances, _ = probed
    bundled = PH3HeadArtifact.load(ROOT / "bench/results/ph3_heads_smollm2.json")
    specs = {
        name: PipelineSpec.from_file(str(ROOT / "pipelines" / f"cmt_ph3_{name}.yaml")) for name in ("context", "memory")
    }
    expected = {"context": sorted(tuple(h) for h in bundled.memory_heads[:4]),
                "memory": sorted(tuple(h) for h in bundled.context_heads[:4])}
    assert not set(expected["context"]) & set(expected["memory"])
    for instance in instances:
        target = first_answer_token(tokenizer, instance.context_answer)
        foil = first_answer_token(tokenizer, instance.memory_answer)
        margins = {}
        for name, spec in specs.items():
            result, zeroed, logits = _run_watching_heads(model, spec, instance)
            assert result["answer"].strip()
            assert zeroed == expected[name], (name, zeroed)
            margins[name] = float(logits[target] - logits[foil])
        assert margins["context"] > margins["memory"], (instance.query, margins)
    _, zeroed_after, _ = _run_watching_heads(
        model, PipelineSpec.from_file(str(ROOT / "pipelines" / "closed_book.yaml")), instances[0]
    )
    assert zeroed_after == []  # suppression ended with each call
