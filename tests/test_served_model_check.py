"""What a served model's server is told is checked at warm-up, against real HTTP servers on local ports (answering
every request with one fixed status and body, ``FixedAnswerServer``), not a patched client:

* a model name the server does not list at ``/v1/models`` is refused in one line naming the model, the server and
  the models it serves; a server that lists none, or cannot be reached yet, is not judged at warm-up;
* Ollama's ``name`` matches its listed ``name:latest``;
* each reply records the model the server reports answering with, not the name asked for;
* an ``api_key_env`` naming an unset variable is one warning naming it, and a server's refusal of the key then
  names the unset variable.

The same check against the real llama.cpp server is in tests/test_served_reader.py."""

import json
import logging
import socket

import pytest
from haystack.dataclasses import ChatMessage

from icr2_components.models.served_model import ServedModel, ServedModelError
from icr2_components.readers.served_chat_reader import ServedChatReader
from icr2_components.testing import FixedAnswerServer

pytestmark = pytest.mark.unit

LISTING = json.dumps({"object": "list", "data": [{"id": "smollm2-135m-instruct", "object": "model"},
                                                  {"id": "llama3:latest", "object": "model"}]}).encode()


def reader(url: str, model: str, **options) -> ServedChatReader:
    # tokenizer=None: these servers have no tokenize endpoint; the context check is not what is tested
    return ServedChatReader(api_base_url=url, model=model, tokenizer=None, max_retries=0, timeout_s=10, **options)


def test_a_model_the_server_does_not_list_is_refused_at_warm_up_naming_what_it_serves():
    with FixedAnswerServer(200, LISTING, "application/json") as server, pytest.raises(ServedModelError) as caught:
        reader(server.url, "gpt-4o").warm_up()
    message = str(caught.value)
    assert "\n" not in message
    assert "does not serve model 'gpt-4o'" in message and server.url in message
    assert "'smollm2-135m-instruct', 'llama3:latest'" in message and f"GET {server.url}/models" in message


def test_a_listed_model_passes_and_ollamas_latest_tag_is_the_same_model():
    with FixedAnswerServer(200, LISTING, "application/json") as server:
        reader(server.url, "smollm2-135m-instruct").warm_up()
        reader(server.url, "llama3").warm_up()  # Ollama answers `llama3` with `llama3:latest`
        with pytest.raises(ServedModelError, match="does not serve model 'llama3:8b'"):
            reader(server.url, "llama3:8b").warm_up()


@pytest.mark.parametrize(("status", "body"), [
    (404, b'{"detail": "Not Found"}'),                       # no /v1/models route
    (200, b"<html><body>Welcome to nginx!</body></html>"),   # not JSON (its chat answer is refused later)
    (200, b'{"object": "list", "data": []}'),               # an empty list says nothing about what it answers
    (401, b'{"error": {"message": "no key"}}'),             # the list needs a key: the chat request says so
])
def test_a_server_that_lists_no_models_is_not_judged(status, body):
    with FixedAnswerServer(status, body, "application/json") as server:
        assert ServedModel(api_base_url=server.url, model="any-name").check_model_served() is True
        reader(server.url, "any-name").warm_up()


def test_a_server_not_reachable_at_warm_up_is_checked_again_later():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    assert ServedModel(api_base_url=url, model="m").check_model_served() is False
    late = reader(url, "m")
    late.warm_up()  # not judged: the chat request reports the server down, with its retries
    assert late._model_checked is False


def test_the_reply_records_the_model_the_server_answered_with():
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen2.5-7b-instruct-q4",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"},
                               "finish_reason": "stop", "logprobs": None}],
                  "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}
    with FixedAnswerServer(200, json.dumps(completion).encode(), "application/json") as server:
        reply = reader(server.url, "qwen2.5").run(messages=[ChatMessage.from_user("Capital of France?")])
    meta = reply["replies"][0].meta
    assert reply["replies"][0].text == "Paris"
    assert meta["model"] == "qwen2.5-7b-instruct-q4"  # the server's, not the name sent
    assert meta["prompt_tokens"] == 12 and meta["completion_tokens"] == 1


def test_an_unset_key_variable_is_named_once_and_in_the_servers_refusal(monkeypatch, caplog):
    monkeypatch.delenv("ICR2_TEST_UNSET_KEY", raising=False)
    refusal = json.dumps({"error": {"message": "Incorrect API key provided: no-key.", "type": "invalid_request_error",
                                    "param": None, "code": "invalid_api_key"}}).encode()
    with FixedAnswerServer(401, refusal, "application/json") as server:
        keyed = reader(server.url, "gpt-4o-mini", api_key_env="ICR2_TEST_UNSET_KEY")
        with caplog.at_level(logging.WARNING, logger="icr2_components.models.served_model"):
            with pytest.raises(ServedModelError) as caught:
                keyed.run(messages=[ChatMessage.from_user("Capital of France?")])
            with pytest.raises(ServedModelError):
                keyed.run(messages=[ChatMessage.from_user("Capital of Italy?")])
    warnings = [r.getMessage() for r in caplog.records if "ICR2_TEST_UNSET_KEY" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, not per request
    assert "not set" in warnings[0] and server.url in warnings[0]
    assert "$ICR2_TEST_UNSET_KEY is not set" in str(caught.value) and "refused the API key" in str(caught.value)


def test_a_set_key_variable_is_sent_without_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("ICR2_TEST_SET_KEY", "sk-test")
    served = ServedModel(api_base_url="http://127.0.0.1:8089/v1", model="m", api_key_env="ICR2_TEST_SET_KEY")
    with caplog.at_level(logging.WARNING, logger="icr2_components.models.served_model"):
        assert served.api_key() == "sk-test" and not served.key_is_unset()
    assert not caplog.records
