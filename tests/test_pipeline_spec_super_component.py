"""compare and serve run a pipeline YAML through Haystack's SuperComponent over its declared ``inputs``/``outputs``:
the mapping a shipped pipeline declares is the one `technique_component` gives a user, a controlled context type
feeds its passages through the same mapping, every reader's answer budget and token stream is an input of its own,
and a declaration that does not fit the pipeline is refused with SuperComponent's reason."""

from pathlib import Path

import pytest
import yaml

from icr2_components import technique_component
from icr2_components.pipeline_spec import (
    CONTEXT_INPUT,
    PipelineSpec,
    PipelineSpecError,
    nested_outputs,
    setting_input,
    setting_inputs,
)
from icr2_components.resources.lookup import shipped_names

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
# every shipped pipeline that declares its inputs, less fine_tuned_reader (it reads a model `icr2 train` writes)
DECLARING = sorted(name for name in shipped_names("pipelines") if name != "fine_tuned_reader"
                   and "inputs" in (yaml.safe_load((ROOT / "pipelines" / f"{name}.yaml").read_text()) or {}))


@pytest.mark.parametrize("name", DECLARING)
def test_compare_serve_and_technique_component_share_the_declared_mapping(name):
    spec = PipelineSpec.from_file(name)
    wrapped = spec.component(controlled=False)
    declared_inputs, declared_outputs = spec.declared_mappings()
    assert {k: wrapped.input_mapping[k] for k in declared_inputs} == declared_inputs
    assert {k: wrapped.output_mapping[k] for k in declared_outputs} == declared_outputs
    user_facing = technique_component(name)
    assert user_facing.input_mapping == declared_inputs
    assert user_facing.output_mapping == declared_outputs
    # every component that takes an answer budget at run time gets one input of its own
    budgets = {component for component, sockets in wrapped.pipeline.inputs().items() if "max_new_tokens" in sockets}
    assert set(setting_inputs(wrapped, "max_new_tokens")) == budgets
    for component in budgets:
        assert wrapped.input_mapping[setting_input(component, "max_new_tokens")] == [f"{component}.max_new_tokens"]


def test_two_readers_get_their_own_budget_inputs():
    wrapped = PipelineSpec.from_file("cmt_multi_agent").component(controlled=False)
    # the judge answers in 3 tokens and the reader in 32: serve lowers each to a request's budget on its own
    assert setting_inputs(wrapped, "max_new_tokens") == {"judge": "judge_max_new_tokens",
                                                         "reader": "reader_max_new_tokens"}
    assert set(setting_inputs(wrapped, "streaming_callback")) == {"judge", "reader"}


def test_controlled_variant_feeds_the_context_entry_through_the_mapping():
    spec = PipelineSpec.from_file("vanilla_rag")
    controlled = spec.component(controlled=True)
    assert controlled.input_mapping[CONTEXT_INPUT] == [spec.context_input]
    retriever = next(t.split(".")[0] for t in spec.inputs["query"] if "retriever" in t)
    assert all(not t.startswith(f"{retriever}.") for t in controlled.input_mapping["query"])
    assert CONTEXT_INPUT not in spec.component(controlled=False).input_mapping  # fed by the retriever there


def test_the_oracle_takes_passages_through_its_declared_input():
    spec = PipelineSpec.from_file("oracle")
    assert spec.documents_input == "documents"
    assert spec.component(controlled=True) is spec.component(controlled=False)  # no variant to build
    assert CONTEXT_INPUT not in spec.component(controlled=False).input_mapping


def test_nested_outputs_give_back_the_pipelines_component_socket_shape():
    wrapped = PipelineSpec.from_file("vanilla_rag").component(controlled=False)
    reader_path = next(p for p, name in wrapped.output_mapping.items() if name == "replies")
    component, socket = reader_path.split(".")
    assert nested_outputs(wrapped, {"replies": ["r"]}) == {component: {socket: ["r"]}}
    assert nested_outputs(wrapped, {}) == {}  # a component that did not run is absent, never None


def _write(tmp_path, data) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_a_declared_input_on_a_connected_socket_is_refused_with_the_reason(tmp_path):
    data = yaml.safe_load((ROOT / "pipelines" / "vanilla_rag.yaml").read_text())
    connected = next(c["receiver"] for c in data["connections"])
    data["inputs"]["query"] = [*data["inputs"]["query"], connected]
    with pytest.raises(PipelineSpecError, match=r"p\.yaml: its declared `inputs`/`outputs` do not map") as error:
        PipelineSpec.from_file(_write(tmp_path, data))
    assert connected.split(".")[0] in str(error.value) or connected.split(".")[1] in str(error.value)


def test_two_declared_outputs_reading_one_socket_are_refused(tmp_path):
    data = yaml.safe_load((ROOT / "pipelines" / "vanilla_rag.yaml").read_text())
    data["outputs"]["answers"] = data["outputs"]["replies"]
    with pytest.raises(PipelineSpecError, match="both read"):
        PipelineSpec.from_file(_write(tmp_path, data))
