"""The gate's local-model settings in one mapping (at most 12 init parameters, YAML round trip), its run-time
overrides checked like its init values, and a prompt past the real SmolLM2's 8,192-token context refused rather
than scored."""

from __future__ import annotations

import inspect

import pytest
from haystack import Pipeline

from icr2_components.errors import ContextTooLongError
from icr2_components.gates import TimeAwareRetrievalGate
from icr2_components.gates.time_aware_retrieval_gate import GateModelSettings

CPU = {"dtype": "float32", "device": "cpu"}
QUESTION = "Who won the 2025 Eurovision Song Contest?"


@pytest.mark.unit
def test_the_gate_takes_at_most_twelve_init_parameters():
    parameters = [name for name, p in inspect.signature(TimeAwareRetrievalGate.__init__).parameters.items()
                  if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert len(parameters) <= 12, parameters
    assert "model_settings" in parameters


@pytest.mark.unit
def test_model_settings_are_checked_and_round_trip_through_yaml():
    gate = TimeAwareRetrievalGate(method="vanilla", model_settings={**CPU, "local_scoring": "generate"})
    assert gate.model_settings == {**CPU, "attn_implementation": "sdpa", "local_scoring": "generate",
                                   "reuse_prompt_prefix": True}
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["icr2_components.*"]).get_component("gate")
    assert loaded.model_settings == gate.model_settings and not loaded.gives_probabilities
    with pytest.raises(ValueError, match=r"model_settings: key 'dtyp'|unknown key\(s\) \['dtyp'\]"):
        TimeAwareRetrievalGate(method="vanilla", model_settings={"dtyp": "float32"})
    with pytest.raises(ValueError, match=r"model_settings\.local_scoring must be one of 'logits', 'generate'"):
        GateModelSettings(local_scoring="sample")
    with pytest.raises(ValueError, match=r"\['device', 'dtype'\] are keys of model_settings now"):
        TimeAwareRetrievalGate(method="vanilla", dtype="float32", device="cpu")


@pytest.mark.unit
def test_run_time_overrides_are_checked_like_init_values():
    gate = TimeAwareRetrievalGate(method="never", model=None)
    assert "no_retrieval" in gate.run(query=QUESTION)
    with pytest.raises(ValueError, match="n_yes must be a non-negative integer or None"):
        gate.run(query=QUESTION, n_yes=-1)
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0.0, 1.0\], got 2"):
        gate.run(query=QUESTION, threshold=2)
    with pytest.raises(ValueError, match=r"method must be one of the registered gate deciders .*, got ''"):
        gate.run(query=QUESTION, method="")  # an empty override is refused, not read as the init method


@pytest.mark.parametrize("local_scoring", ["logits", "generate"])
def test_a_prompt_past_smollm2s_context_is_refused_not_scored(smollm2, local_scoring):
    gate = TimeAwareRetrievalGate(method="vanilla", model="smollm2-135m-instruct",
                                  model_settings={**CPU, "local_scoring": local_scoring})
    long_question = "Which of these facts matters most? " + " ".join(f"fact{i} holds" for i in range(4000))
    with pytest.raises(ContextTooLongError) as raised:
        gate.run(query=long_question)
    assert raised.value.limit == 8192 and raised.value.prompt_tokens > 8192
    assert f"is {raised.value.prompt_tokens} tokens, but smollm2-135m-instruct takes at most 8192" in str(raised.value)
    assert gate.stats["decisions"] == 0
    # a question that fits is still decided by the same gate
    assert gate.run(query=QUESTION)["decision"]["retrieve"] in (True, False)
