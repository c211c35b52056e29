"""How ``icr2 serve`` reads a request body, without a server: the chat request's strict types, which OpenAI fields
are refused, accepted as asking for nothing or accepted as not changing the answer, the numbers JSON does not
have, and the strict types of a pipeline's declared inputs. The same refusals over real HTTP are in
tests/test_serve_openai.py."""

import json

import pytest
from pydantic import ValidationError, create_model

from icr2_components.serving.app import non_finite_json_number
from icr2_components.serving.openai_models import (
    ACCEPTED_UNUSED_FIELDS,
    OPENAI_CHAT_ERRORS,
    UNSUPPORTED_FIELDS,
    ChatCompletionRequest,
    ChatRequestRefused,
    answer_budget,
    check_request_fields,
    openai_error,
)
from icr2_components.serving.request_model import STRICT_JSON_TYPES

pytestmark = pytest.mark.unit

BASE = {"model": "closed_book", "messages": [{"role": "user", "content": "Who wrote Hamlet?"}]}


def request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(json.loads(json.dumps({**BASE, **fields})))


@pytest.mark.parametrize(("fields", "loc"), [
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"max_completion_tokens": 2.0}, "max_completion_tokens"),
    ({"n": True}, "n"),
    ({"stream": 1}, "stream"),
])
def test_a_boolean_or_string_is_not_a_number_nor_a_number_a_boolean(fields, loc):
    with pytest.raises(ValidationError) as caught:
        request(**fields)
    assert caught.value.errors()[0]["loc"] == (loc,)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED_FIELDS))
def test_every_field_the_pipeline_cannot_honour_is_refused_when_it_asks_for_something(name):
    asking = {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
              "parallel_tool_calls": True, "functions": [{"name": "f"}], "function_call": "auto",
              "response_format": {"type": "json_object"}, "logprobs": True, "top_logprobs": 3, "temperature": 0.0,
              "top_p": 0.9, "seed": 1, "stop": ["\n"], "frequency_penalty": 0.5, "presence_penalty": -0.5,
              "logit_bias": {"50256": -100}, "reasoning_effort": "low", "verbosity": "low",
              "prediction": {"type": "content", "content": "x"}, "audio": {"voice": "alloy", "format": "wav"},
              "modalities": ["text", "audio"], "web_search_options": {}}
    with pytest.raises(ChatRequestRefused) as caught:
        check_request_fields(request(**{name: asking[name]}))
    refused = caught.value
    assert refused.status_code == 400 and refused.error == "unsupported_parameter" and refused.param == name
    assert f"'{name}'" in refused.detail and UNSUPPORTED_FIELDS[name][1] in refused.detail
    status, body = openai_error(refused.status_code, refused.error, refused.detail, refused.param)
    assert status == 400 and body["error"]["code"] in OPENAI_CHAT_ERRORS[400]


@pytest.mark.parametrize("fields", [
    {"tools": []}, {"tools": None}, {"tool_choice": "none"}, {"logprobs": False}, {"response_format": {"type": "text"}},
    {"frequency_penalty": 0}, {"presence_penalty": 0.0}, {"logit_bias": {}}, {"stop": []}, {"modalities": ["text"]},
    {"temperature": None},
])
def test_a_value_that_asks_for_nothing_is_accepted_and_named_as_unused(fields):
    assert check_request_fields(request(**fields)) == sorted(fields)


def test_false_is_not_zero_and_zero_is_not_false():
    for fields in ({"frequency_penalty": False}, {"logprobs": 0}):
        with pytest.raises(ChatRequestRefused):
            check_request_fields(request(**fields))


def test_fields_that_do_not_change_the_answer_are_accepted_and_named():
    fields = {name: "x" for name in ACCEPTED_UNUSED_FIELDS}
    assert check_request_fields(request(**fields)) == sorted(ACCEPTED_UNUSED_FIELDS)
    assert check_request_fields(request(stream_options={"include_usage": True})) == ["stream_options"]
    assert check_request_fields(request(stream=True, stream_options={"include_usage": True})) == []


def test_an_unknown_field_is_refused_with_the_nearest_known_name():
    with pytest.raises(ChatRequestRefused) as caught:
        check_request_fields(request(temprature=0.2, colour="blue"))
    refused = caught.value
    assert refused.error == "unknown_parameter" and refused.param == "temprature"
    assert "'temprature', 'colour'" in refused.detail
    assert "Did you mean 'temperature' for 'temprature'?" in refused.detail


def test_an_unsupported_field_is_named_before_an_unknown_one():
    with pytest.raises(ChatRequestRefused) as caught:
        check_request_fields(request(colour="blue", tools=[{"type": "function"}]))
    assert caught.value.error == "unsupported_parameter" and caught.value.param == "tools"


@pytest.mark.parametrize(("body", "named"), [
    (b'{"a": NaN}', "NaN"), (b'{"a": [1, Infinity]}', "Infinity"), (b'{"a": {"b": -Infinity}}', "-Infinity"),
    (b'{"a": 1e999}', "1e999"), (b'{"a": -1E400}', "-1E400"),
])
def test_numbers_json_does_not_have_are_named(body, named):
    problem = non_finite_json_number(body)
    assert problem is not None and problem.startswith(named + " ")


@pytest.mark.parametrize("body", [b'{"a": 1.5e300, "b": -0.0, "c": "NaN"}', b'{"a": ', b"\xff\xfe", b"", b"[1, 2]"])
def test_finite_or_non_json_bodies_are_left_to_the_route(body):
    assert non_finite_json_number(body) is None


def test_a_body_nested_deeper_than_the_json_reader_follows_is_named_not_left_to_a_generic_error():
    # within any body limit (60 kB), yet past Python's recursion limit: FastAPI's own reader would answer
    # "There was an error parsing the body"
    problem = non_finite_json_number(b'{"a": ' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    assert problem is not None and "nest deeper" in problem
    assert non_finite_json_number(b'{"a": ' + b"[" * 50 + b"]" * 50 + b"}") is None


def test_declared_inputs_take_their_json_type_strictly():
    model = create_model("Inputs", top_k=(STRICT_JSON_TYPES[int], ...), alpha=(STRICT_JSON_TYPES[float], ...),
                         exact=(STRICT_JSON_TYPES[bool], ...), tags=(list[STRICT_JSON_TYPES[str]], ...))
    good = model.model_validate({"top_k": 3, "alpha": 2, "exact": False, "tags": ["a"]})
    assert (good.top_k, good.alpha, good.exact, good.tags) == (3, 2.0, False, ["a"])
    for field, value in (("top_k", True), ("top_k", "3"), ("top_k", 3.0), ("alpha", float("nan")),
                         ("alpha", float("inf")), ("alpha", True), ("exact", 1), ("exact", "yes"), ("tags", [1])):
        values = {"top_k": 3, "alpha": 0.5, "exact": True, "tags": ["a"], field: value}
        with pytest.raises(ValidationError) as caught:
            model.model_validate(values)
        assert caught.value.errors()[0]["loc"][0] == field, (field, value)


@pytest.mark.parametrize("body", [{"max_tokens": True}, {"max_completion_tokens": 0}, {"max_tokens": 2.5},
                                  {"max_tokens": "8"}])
def test_a_budget_given_as_a_mapping_is_checked_as_the_route_checks_it(body):
    """What hayhooks' own server forwards to the wrapper's hook is a plain mapping."""
    with pytest.raises(ChatRequestRefused) as caught:
        answer_budget(body)
    assert caught.value.param == next(iter(body)) and caught.value.error == "invalid_request"


def test_a_budget_given_as_a_mapping_lowers_the_answer_or_is_absent():
    assert answer_budget({"max_completion_tokens": 5, "max_tokens": 9}) == 5
    assert answer_budget({"max_tokens": 9}) == 9 and answer_budget({}) is None
