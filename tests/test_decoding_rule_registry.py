"""Adding a decoding rule is one class in one file: this file defines one, registers it and decodes with it in
ContextAwareDecodingReader on the real SmolLM2, with its own parameter as a reader keyword, a run input and YAML."""

from dataclasses import dataclass

import pytest
from haystack import Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ChatMessage

from icr2_components.pipeline_loading import loads_pipeline
from icr2_components.readers import ContextAwareDecodingReader, LocalChatReader
from icr2_components.readers.decoding_rules import (
    DecodingRule,
    UnknownDecodingRuleError,
    register_decoding_rule,
    registry,
)
from icr2_components.readers.decoding_rules.registry import decoding_rule, decoding_rule_names

TOKENS = 6
CPU = {"dtype": "float32", "device": "cpu"}
CONTEXT = [ChatMessage.from_user("Context: The Eiffel Tower is in Rome.\nQuestion: Where is the Eiffel Tower?")]
MEMORY = [ChatMessage.from_user("Question: Where is the Eiffel Tower?")]


@dataclass(frozen=True)
class ContextOnlyParameters:
    """A positive factor on the context logits: it changes no argmax, so greedy output stays the plain reader's."""

    scale: float = 1.0

    def __post_init__(self):
        if not self.scale > 0:
            raise ValueError(f"context_only: scale must be > 0, got {self.scale!r}.")


class ContextOnly(DecodingRule):
    """The context logits alone (scaled): decoding through the two-pass loop that ignores the memory pass."""

    parameters_class = ContextOnlyParameters

    def combine(self, context_logits, memory_logits, weight):
        if weight == 0:
            return context_logits, {}
        return context_logits * self.parameters.scale, {"memory_ignored": 1.0}


@pytest.fixture
def context_only():
    """``ContextOnly`` registered as ``context_only`` for one test (the registry is restored afterwards)."""
    register_decoding_rule("context_only")(ContextOnly)
    yield "context_only"
    registry._RULES.unregister("context_only")


def test_a_rule_defined_in_a_test_decodes_in_the_reader_as_the_plain_reader(context_only, smollm2):
    assert context_only in decoding_rule_names()
    plain = LocalChatReader(max_new_tokens=TOKENS, **CPU).run(messages=CONTEXT)["replies"][0]
    reader = ContextAwareDecodingReader(technique=context_only, alpha=1.0, context_only_scale=2.0,
                                        max_new_tokens=TOKENS, **CPU)
    reply = reader.run(messages=CONTEXT, memory_messages=MEMORY)["replies"][0]
    assert plain.text.strip() and reply.text == plain.text
    assert reply.meta["completion_tokens"] == plain.meta["completion_tokens"]
    assert reply.meta["prompt_tokens"] == plain.meta["prompt_tokens"] > reply.meta["memory_prompt_tokens"]
    assert reply.meta["technique"] == "context_only" and reply.meta["alpha"] == 1.0
    assert reply.meta["context_only_scale"] == 2.0 and reply.meta["memory_ignored"] == 1.0
    overridden = reader.run(messages=CONTEXT, memory_messages=MEMORY, context_only_scale=3.0)["replies"][0]
    assert overridden.meta["context_only_scale"] == 3.0 and overridden.text == plain.text


@pytest.mark.unit
def test_the_rule_parameter_is_a_keyword_a_socket_and_a_yaml_key(context_only):
    reader = ContextAwareDecodingReader(technique=context_only, context_only_scale=2.0)
    assert reader.rule_parameters == {"context_only_scale": 2.0}
    alone = Pipeline()  # Haystack's public view of the input sockets (a component joins one pipeline: a fresh one)
    alone.add_component("reader", ContextAwareDecodingReader(technique=context_only, context_only_scale=2.0))
    assert "context_only_scale" in alone.inputs()["reader"]
    data = component_to_dict(reader, "reader")
    assert data["init_parameters"]["context_only_scale"] == 2.0
    assert component_to_dict(component_from_dict(ContextAwareDecodingReader, data, "reader"), "reader") == data
    pipeline = Pipeline()
    pipeline.add_component("reader", reader)
    assert loads_pipeline(pipeline.dumps()).get_component("reader").rule_parameters == {"context_only_scale": 2.0}
    # the chosen rule's parameters are stated with their defaults
    assert ContextAwareDecodingReader(technique=context_only).rule_parameters == {"context_only_scale": 1.0}


@pytest.mark.unit
def test_the_rule_checks_its_own_parameters_and_unknown_names_list_the_registered_ones(context_only):
    with pytest.raises(ValueError, match=r"context_only: scale must be > 0, got -1"):
        ContextAwareDecodingReader(technique=context_only, context_only_scale=-1.0)
    with pytest.raises(ValueError, match=r"unknown parameters \['context_only_scael'\].*'context_only_scale'"):
        ContextAwareDecodingReader(technique=context_only, context_only_scael=2.0)
    with pytest.raises(ValueError, match=r"Unknown technique 'dola'; choose one of \['none', 'acd', 'cad', "
                                         r"'coiecd', 'context_only'\]"):
        ContextAwareDecodingReader(technique="dola")
    with pytest.raises(UnknownDecodingRuleError, match=r"Unknown decoding rule 'dola'; choose one of \['acd', 'cad', "
                                                       r"'coiecd', 'context_only'\]"):
        decoding_rule("dola")


@pytest.mark.unit
def test_registration_refuses_a_taken_name_a_non_rule_and_a_name_unfit_for_keywords(context_only):
    register_decoding_rule(context_only)(ContextOnly)  # the same class again: a no-op

    class Other(ContextOnly):
        pass

    with pytest.raises(ValueError, match="'context_only' is taken"):
        register_decoding_rule(context_only)(Other)
    with pytest.raises(TypeError, match="DecodingRule subclasses"):
        register_decoding_rule("not_a_rule")(dict)
    for bad in ("Context-Only", "none", ""):
        with pytest.raises(ValueError, match="lowercase identifier"):
            register_decoding_rule(bad)


@pytest.mark.unit
def test_the_registry_is_restored_after_a_test_that_registers():
    assert "context_only" not in decoding_rule_names()
