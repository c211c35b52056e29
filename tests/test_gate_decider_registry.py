"""A gate method is one registered GateDecider class: a new one, defined here and nowhere else in the package, runs
in the real gate inside a Haystack pipeline and through a YAML round-trip; an unknown method names the registered
ones; the CLI offers what the registry holds."""

import datetime

import pytest
from haystack import Pipeline

from icr2_components.gates import GateDecider, GateDecision, GateQuestion, TimeAwareRetrievalGate, register_gate_decider
from icr2_components.gates.gate_decider import YesNoAnswer, gate_decider_class, gate_decider_names

pytestmark = pytest.mark.unit

BUILT_IN = {"ta_are", "vanilla", "threshold", "always", "never"}


@register_gate_decider("contains_digit")
class ContainsDigitDecider(GateDecider):
    """Retrieves when the question holds a digit (years and dates date quickly); asks no model."""

    needs_model = False

    def decide(self, question: GateQuestion, model) -> GateDecision:
        assert model is None  # needs_model = False: the gate hands over no model
        return GateDecision.fixed(any(character.isdigit() for character in question.query))


QUESTIONS = {
    "Who won the 2025 Eurovision Song Contest?": True,
    "What is the capital of France?": False,
    "Which team won Super Bowl LIX on 9 February?": True,
    "Who wrote Hamlet?": False,
}


def test_the_registry_holds_the_built_in_methods_and_the_new_one():
    assert BUILT_IN | {"contains_digit"} <= set(gate_decider_names())
    assert list(gate_decider_names()) == sorted(gate_decider_names())
    assert (
        gate_decider_class("contains_digit") is ContainsDigitDecider and ContainsDigitDecider.name == "contains_digit"
    )
    assert {gate_decider_class(name).__module__ for name in BUILT_IN} == {
        f"icr2_components.gates.deciders.{name}" for name in BUILT_IN}  # one file each


def _routing_pipeline(gate: TimeAwareRetrievalGate) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("gate", gate)
    return pipeline


def _check_routes(pipeline: Pipeline) -> None:
    for question, needs_retrieval in QUESTIONS.items():
        result = pipeline.run({"gate": {"query": f"  {question} "}})["gate"]
        chosen, other = ("retrieve", "no_retrieval") if needs_retrieval else ("no_retrieval", "retrieve")
        assert result[chosen] == question and other not in result
        decision = result["decision"]
        assert decision["method"] == "contains_digit" and decision["retrieve"] is needs_retrieval
        assert decision["p_yes"] == (1.0 if needs_retrieval else 0.0) and decision["scoring"] == "fixed"
        assert decision["prompt"] == "" and decision["demonstrations"] == [] and decision["today"] is None
        assert list(decision) == ["method", "today", "prompt", "demonstrations", "excluded_demonstrations", "reply",
                                  "parsed", "answer_mass", "p_yes", "scoring", "retrieve", "latency_s"]


def test_a_decider_defined_in_a_test_routes_in_a_pipeline_and_after_a_yaml_round_trip():
    gate = TimeAwareRetrievalGate(method="contains_digit", model=None)
    pipeline = _routing_pipeline(gate)
    _check_routes(pipeline)
    assert gate.stats == {"decisions": 4, "retrieve": 2, "unparsed_replies": 0, "reply_fallbacks": 0,
                          "excluded_demonstrations": 0}

    text = pipeline.dumps()
    assert "method: contains_digit" in text
    restored = Pipeline.loads(text, allowed_modules=["icr2_components.*"])
    again = restored.get_component("gate")
    assert isinstance(again, TimeAwareRetrievalGate) and again.method == "contains_digit"
    assert again.to_dict() == gate.to_dict()
    _check_routes(restored)


def test_the_run_time_method_override_reaches_the_new_decider():
    gate = TimeAwareRetrievalGate(method="never", model=None)
    assert "no_retrieval" in gate.run(query="Who won in 2024?")
    assert gate.run(query="Who won in 2024?", method="contains_digit")["retrieve"] == "Who won in 2024?"
    assert gate.run(query="Who won in 2024?")["decision"]["method"] == "never"


def test_an_unknown_method_names_the_registered_ones():
    for build in (lambda: TimeAwareRetrievalGate(method="sometimes"),
                  lambda: TimeAwareRetrievalGate(method="always", model=None).run(query="Who?", method="sometimes")):
        with pytest.raises(ValueError, match="method must be one of the registered gate deciders") as error:
            build()
        message = str(error.value)
        assert "'sometimes'" in message and "register_gate_decider" in message
        for name in BUILT_IN | {"contains_digit"}:
            assert repr(name) in message


def test_registering_is_checked():
    with pytest.raises(ValueError, match="taken by"):
        @register_gate_decider("always")
        class AnotherAlways(GateDecider):
            needs_model = False

            def decide(self, question, model):
                return GateDecision.fixed(True)

    assert gate_decider_class("always").__name__ == "AlwaysRetrieveDecider"
    with pytest.raises(TypeError, match="GateDecider subclasses"):
        register_gate_decider("not_a_decider")(object)
    with pytest.raises(ValueError, match="non-empty"):
        register_gate_decider(" ")
    assert "not_a_decider" not in gate_decider_names()


def test_a_model_asking_decider_gets_the_gates_model_and_its_flags_are_enforced():
    asked = []

    class FixedAnswerModel:
        def ask(self, prompt: str) -> YesNoAnswer:
            asked.append(prompt)
            return YesNoAnswer(p_yes=0.7, scoring="next_token", answer_mass=0.9, rendered_prompt=f"<user>{prompt}[")

    @register_gate_decider("echo_at_0_8")
    class EchoDecider(GateDecider):
        needs_logits = True

        def decide(self, question, model):
            return GateDecision.at_cut(model.ask(f"Retrieve for {question.query}?"), 0.8, prompt="p")

    try:
        gate = TimeAwareRetrievalGate(method="echo_at_0_8", model="any-model-name")
        gate.ask = FixedAnswerModel().ask  # stands in for the local model: what reaches the decider is gate.ask
        decision = gate.run(query="Who?")["decision"]
        assert asked == ["Retrieve for Who??"] and decision["retrieve"] is False
        assert (decision["p_yes"], decision["threshold"], decision["answer_mass"]) == (0.7, 0.8, 0.9)
        assert list(decision)[8:] == ["p_yes", "scoring", "rendered_prompt", "threshold", "reused_prefix_tokens",
                                      "retrieve", "latency_s"]
        with pytest.raises(ValueError, match="needs a model"):
            TimeAwareRetrievalGate(method="echo_at_0_8", model=None)
        with pytest.raises(ValueError, match="logits"):
            TimeAwareRetrievalGate(method="echo_at_0_8", model_settings={"local_scoring": "generate"})
    finally:
        from icr2_components.gates import gate_decider

        gate_decider._DECIDERS.unregister("echo_at_0_8")


def test_the_cli_offers_the_registered_methods():
    from icr2_components.cli import build_parser

    parser = build_parser()
    eval_gate = parser._subparsers._group_actions[0].choices["eval-gate"]
    method = next(action for action in eval_gate._actions if action.dest == "method")
    assert tuple(method.choices) == gate_decider_names() and method.default == "ta_are"


def test_a_model_asking_decider_called_without_a_model_names_its_method():
    @register_gate_decider("asks_without_model")
    class AskingDecider(GateDecider):
        def decide(self, question, model):
            return GateDecision.at_cut(self.model_to_ask(model).ask(question.query))

    try:
        with pytest.raises(TypeError, match="'asks_without_model' gate method asks a model"):
            AskingDecider().decide(GateQuestion(query="Who?", today=datetime.date(2025, 1, 1)), None)
    finally:
        from icr2_components.gates import gate_decider

        gate_decider._DECIDERS.unregister("asks_without_model")
