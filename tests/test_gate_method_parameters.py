"""A gate method owns its parameters: a new method with a parameter of its own is one new module (written here into
a temporary folder, imported from there) and this test; the gate's own code is untouched. The built-in methods
read nothing of the gate but their own frozen parameters, and the shipped pipeline keeps its YAML.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import textwrap
from pathlib import Path

import pytest
from haystack import Pipeline

from icr2_components.gates import TimeAwareRetrievalGate
from icr2_components.gates.gate_decider import gate_decider_class, gate_parameter_owners
from icr2_components.pipeline_loading import loads_pipeline

NEW_METHOD = textwrap.dedent('''
    """`digit_count`: retrieve when the question holds at least `min_digits` digits (a trivial method with a
    parameter of its own, for the registry test)."""

    from dataclasses import dataclass

    from icr2_components.gates.gate_decider import GateDecider, GateDecision, register_gate_decider


    @dataclass(frozen=True)
    class DigitCountParameters:
        min_digits: int = 1

        def __post_init__(self):
            if not isinstance(self.min_digits, int) or self.min_digits < 1:
                raise ValueError(f"min_digits must be a positive integer, got {self.min_digits!r}.")


    @register_gate_decider("digit_count")
    class DigitCountDecider(GateDecider):
        needs_model = False
        Parameters = DigitCountParameters

        def decide(self, question, model):
            digits = sum(character.isdigit() for character in question.query)
            return GateDecision.fixed(digits >= self.parameters.min_digits)
''')


@pytest.fixture(scope="module")
def digit_count_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "digit_count_gate.py").write_text(NEW_METHOD)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("digit_count_gate")
    finally:
        sys.path.remove(str(folder))


@pytest.mark.unit
def test_a_new_method_with_its_own_parameter_is_one_module(digit_count_module):
    assert gate_decider_class("digit_count") is digit_count_module.DigitCountDecider
    assert gate_parameter_owners()["min_digits"] == ("digit_count",)
    gate = TimeAwareRetrievalGate(method="digit_count", model=None, min_digits=4)
    assert gate.parameters_of() == digit_count_module.DigitCountParameters(min_digits=4)
    assert "no_retrieval" in gate.run(query="Who won in 202?")
    assert "retrieve" in gate.run(query="Who won in 2025?")
    # the gate checks the new parameter through the method's own class, and refuses it where no method owns it
    with pytest.raises(ValueError, match="min_digits must be a positive integer"):
        TimeAwareRetrievalGate(method="digit_count", model=None, min_digits=0)
    # a YAML round trip keeps the parameter as a plain init parameter of the gate
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    restored = loads_pipeline(pipeline.dumps())
    again = restored.get_component("gate")
    assert again.to_dict() == gate.to_dict() and again.to_dict()["init_parameters"]["min_digits"] == 4
    assert "no_retrieval" in restored.run({"gate": {"query": "Who won in 202?"}})["gate"]
    # nothing in the gate's module names the new method or its parameter
    gate_source = Path(inspect.getsourcefile(TimeAwareRetrievalGate)).read_text()
    assert "digit_count" not in gate_source and "min_digits" not in gate_source


@pytest.mark.unit
def test_an_unknown_key_names_every_method_parameter():
    with pytest.raises(ValueError, match=r"\['n_yess'\].*n_yes \(ta_are\).*threshold \(threshold\)"):
        TimeAwareRetrievalGate(method="never", model=None, n_yess=3)


def test_the_built_in_methods_own_frozen_parameters_and_the_gate_keeps_only_shared_ones():
    owned = {"ta_are": {"time_aware", "n_yes", "n_no", "yes_pool", "no_pool", "no_selection",
                        "demonstration_order", "embedding_model"},
             "threshold": {"threshold", "artifact"}, "learned": {"artifact"}, "vanilla": set(), "always": set(),
             "never": set()}
    for method, names in owned.items():
        parameters = gate_decider_class(method).Parameters
        assert dataclasses.is_dataclass(parameters) and parameters.__dataclass_params__.frozen, method
        assert set(gate_decider_class(method).parameter_names()) == names, method
    gate_parameters = set(inspect.signature(TimeAwareRetrievalGate.__init__).parameters) - {"self", "method_parameters"}
    assert not gate_parameters & set().union(*owned.values())
    # a decider reads nothing of the gate: it is built from its parameters and the device only
    for method in owned:
        source = inspect.getsource(gate_decider_class(method))
        assert "self.gate" not in source and ".gate." not in source, method


@pytest.mark.unit
def test_a_method_sees_its_parameters_with_the_runs_overrides_only():
    gate = TimeAwareRetrievalGate(method="never", model=None, n_yes=3, threshold=0.3)
    assert gate.parameters_of("ta_are").n_yes == 3 and gate.parameters_of("ta_are").n_no == 2
    assert gate.parameters_of("threshold").threshold == 0.3 and gate.parameters_of("threshold").artifact is None
    assert gate.parameters_of("never") == gate_decider_class("never").Parameters()
    with pytest.raises(dataclasses.FrozenInstanceError):
        gate.parameters_of("ta_are").n_yes = 5


def test_the_shipped_adaptive_pipeline_loads_unchanged():
    path = Path(__file__).resolve().parents[1] / "pipelines" / "adaptive_rag.yaml"
    pipeline = loads_pipeline(path.read_text())
    gate = pipeline.get_component("gate")
    assert gate.parameters_of().artifact == "adaptive_rag.learned"  # a shipped artifact, by name
    assert gate.parameters_of("ta_are").embedding_model == "all-minilm-l6-v2"
    assert loads_pipeline(pipeline.dumps()).get_component("gate").to_dict() == gate.to_dict()
