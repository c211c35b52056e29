"""icr2 serve as an OpenAI-compatible server, driven by the official `openai` client over real HTTP: a real
uvicorn on a free loopback port serving pipelines/closed_book.yaml with the real SmolLM2 (12 new tokens at most).

The model list, a completion equal to what POST /closed_book/run answers (greedy decoding), real token streaming
whose pieces concatenate to that answer, multi-turn (the last user message is the query, the others are counted
in a header), the OpenAI-shaped errors the client raises as its own exceptions, and the /run surface unchanged.
Every JSON answer and every streamed chunk is checked against what the server's /openapi.json documents."""

import contextlib
import functools
import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[1]
MAX_NEW_TOKENS = 12
MAX_BODY = 200_000
MODEL = "closed_book"
FRANCE = "What is the capital of France?"


@contextlib.contextmanager
def serving(pipeline: Path, **options):
    """`create_serving_app(pipeline)` behind a real uvicorn on a free loopback port: (url, app)."""
    import uvicorn

    from icr2_components.serving import create_serving_app
    from icr2_components.serving.app import server_settings

    app = create_serving_app(str(pipeline), **options)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **server_settings()))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uvicorn_server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    assert uvicorn_server.started, "the server did not start in 60 s"
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def server():
    with serving(ROOT / "pipelines" / "closed_book.yaml", max_new_tokens=MAX_NEW_TOKENS, max_body_bytes=MAX_BODY,
                 max_query_chars=MAX_BODY) as served:
        yield served


@pytest.fixture(scope="module")
def url(server) -> str:
    return server[0]


@pytest.fixture(scope="module")
def client(url) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def openapi(url) -> dict:
    return httpx.get(f"{url}/openapi.json", timeout=30).json()


@pytest.fixture(scope="module")
def run_answer(url) -> str:
    """What POST /closed_book/run answers to FRANCE: the reference for every OpenAI answer below."""
    response = httpx.post(f"{url}/{MODEL}/run", json={"query": FRANCE}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["result"]["replies"][0]


@pytest.fixture(scope="module")
def completion(client):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": FRANCE}])
    return raw


def validator(openapi: dict, schema: dict) -> Draft202012Validator:
    return Draft202012Validator({**schema, "components": openapi["components"]})


def assert_documented(openapi: dict, path: str, method: str, status: int, payload: dict,
                      media_type: str = "application/json") -> None:
    responses = openapi["paths"][path][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}; /openapi.json lists {sorted(responses)}"
    schema = responses[str(status)]["content"][media_type]["schema"]
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator(openapi, schema).iter_errors(payload)]
    assert not errors, (status, payload, errors)


def stream_events(url: str, body: dict) -> tuple[httpx.Response, list[str]]:
    """The raw server-sent events of a streamed completion (the `data:` of each)."""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
        text = response.read().decode()
    events = [block.removeprefix("data: ") for block in text.split("\n\n") if block]
    return response, events


def test_the_pipeline_is_the_one_model(client, url, openapi):
    models = client.models.list()
    assert [model.id for model in models] == [MODEL]
    assert models.data[0].owned_by == "icr2_components" and models.data[0].object == "model"
    for path in ("/v1/models", "/models"):  # hayhooks' alias answers the same
        response = httpx.get(f"{url}{path}", timeout=30)
        assert response.status_code == 200 and response.json()["data"][0]["id"] == MODEL
        assert_documented(openapi, path, "GET", 200, response.json())


def test_a_completion_is_the_run_routes_answer_with_usage(completion, run_answer, openapi):
    answer = completion.parse()
    text = answer.choices[0].message.content
    assert text and text == run_answer
    assert "paris" in text.lower()
    assert answer.model == MODEL and answer.object == "chat.completion"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage.prompt_tokens > 10 and 0 < answer.usage.completion_tokens <= MAX_NEW_TOKENS
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert completion.headers["x-icr2-ignored-messages"] == "0" and completion.headers["x-icr2-query-message"] == "0"
    assert completion.headers["x-icr2-ignored-fields"] == ""
    assert_documented(openapi, "/v1/chat/completions", "POST", 200, json.loads(completion.content))
    assert "icr2_outputs" not in json.loads(completion.content)  # closed-book declares `replies` only


def test_streaming_sends_the_tokens_as_they_come_and_they_make_the_same_answer(client, url, completion, openapi):
    reference = completion.parse()
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}],
                                                 stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == reference.choices[0].message.content
    assert len(pieces) > 1, pieces  # real streaming: the reader's tokens, not one chunk at the end
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == reference.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == reference.usage.model_dump()
    assert len({c.id for c in chunks}) == 1

    # on the wire: each event's data is the documented chunk, and the stream ends with [DONE]
    response, events = stream_events(url, {"model": MODEL, "messages": [{"role": "user", "content": FRANCE}],
                                           "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    media = openapi["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    chunk_schema = validator(openapi, media["x-event-data"])
    for event in events[:-1]:
        assert not list(chunk_schema.iter_errors(json.loads(event))), event
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]) == "".join(pieces)
    assert all(json.loads(e).get("usage") is None for e in events[:-1])  # no usage chunk unless asked


def test_the_last_user_message_is_the_query_and_the_other_turns_are_counted(client, completion):
    raw = client.chat.completions.with_raw_response.create(model=MODEL, user="alice", logprobs=False, messages=[
        {"role": "system", "content": "You answer in German."},
        {"role": "user", "content": "What is the capital of Italy?"},
        {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": [{"type": "text", "text": FRANCE}]},  # content parts: their text
        {"role": "assistant", "content": "The"},                          # a trailing prefill is not used either
    ])
    assert raw.parse().choices[0].message.content == completion.parse().choices[0].message.content
    assert raw.headers["x-icr2-query-message"] == "3" and raw.headers["x-icr2-ignored-messages"] == "4"
    # accepted and not used: a field that does not change the answer, and one given the value that asks for nothing
    assert raw.headers["x-icr2-ignored-fields"] == "logprobs,user"


def test_max_tokens_lowers_the_budget_and_never_raises_it(client):
    short = client.chat.completions.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": FRANCE}])
    assert short.usage.completion_tokens == 2 and short.choices[0].finish_reason == "length"
    capped = client.chat.completions.create(model=MODEL, max_completion_tokens=500,
                                            messages=[{"role": "user", "content": "Tell me a long story."}])
    assert capped.usage.completion_tokens == MAX_NEW_TOKENS and capped.choices[0].finish_reason == "length"


def test_an_unknown_model_is_the_clients_not_found_error(client, openapi):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": FRANCE}])
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    assert MODEL in caught.value.message
    assert_documented(openapi, "/v1/chat/completions", "POST", 404, {"error": caught.value.body})


@pytest.mark.parametrize("stream", [False, True])
def test_an_over_long_prompt_is_a_bad_request_naming_the_limit(client, openapi, stream):
    """The reader refuses a prompt over SmolLM2's context; the client gets OpenAI's context_length_exceeded, and
    a streamed request gets it before any event (the stream had not started)."""
    with pytest.raises(openai.BadRequestError) as caught:
        result = client.chat.completions.create(model=MODEL, stream=stream,
                                                messages=[{"role": "user", "content": "word " * 10_000}])
        list(result) if stream else None
    error = caught.value
    assert error.status_code == 400 and error.code == "context_length_exceeded"
    limit = re.search(r"has \d+ tokens but smollm2-135m-instruct accepts \d+ \(\d+ context", error.message)
    assert limit, error.message
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, {"error": error.body})


@pytest.mark.parametrize("messages, extra, param, words", [
    ([{"role": "assistant", "content": "Hello"}], {}, "messages", ["no user message"]),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}], {},
     "messages[0].content", ["not text"]),
    ([{"role": "user", "content": "   "}], {}, "messages[0].content", ["the query", "shows no text"]),
    # zero-width spaces show nothing either (they passed a strip() check and were answered)
    ([{"role": "user", "content": "\u200b\u200b"}], {}, "messages[0].content", ["the query", "shows no text"]),
    ([], {}, "messages", ["at least 1 item"]),
    ([{"role": "user", "content": FRANCE}], {"n": 2}, "n", ["less than or equal to 1"]),
    ([{"role": "user", "content": FRANCE}], {"max_tokens": 0}, "max_tokens", ["greater than or equal to 1"]),
    # a boolean is not a number: `true` was read as 1 token
    ([{"role": "user", "content": FRANCE}], {"max_tokens": True}, "max_tokens", ["valid integer"]),
    ([{"role": "user", "content": FRANCE}], {"max_completion_tokens": 2.5}, "max_completion_tokens",
     ["valid integer"]),
    ([{"role": "user", "content": FRANCE}], {"extra_body": {"n": True}}, "n", ["valid integer"]),
    ([{"role": "robot", "content": FRANCE}], {}, "messages.0.role", ["messages.0.role"]),
    # a string is not a boolean: "yes" was read as stream: true
    ([{"role": "user", "content": FRANCE}], {"extra_body": {"stream": "yes"}}, "stream", ["valid boolean"]),
    ([{"role": "user", "content": FRANCE}], {"extra_body": {"stream": True, "stream_options": {"include_usage": 1}}},
     "stream_options.include_usage", ["valid boolean"]),
])
def test_invalid_requests_are_bad_requests_naming_the_field(client, openapi, messages, extra, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=messages, **extra)
    error = caught.value
    assert error.code == "invalid_request" and error.param == param, error.body
    assert all(word in error.message for word in words), error.message
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, {"error": error.body})


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                                                                                    "properties": {}}}}


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"tools": [WEATHER_TOOL]}, "tools", ["'tools'", "call no tools"]),
    ({"tool_choice": "required"}, "tool_choice", ["'tool_choice'", "call no tools"]),
    ({"response_format": {"type": "json_object"}}, "response_format", ["'response_format'", "free text"]),
    ({"logprobs": True, "top_logprobs": 2}, "logprobs", ["'logprobs'", "'top_logprobs'", "no log-probabilities"]),
    ({"temperature": 0.7}, "temperature", ["'temperature'", "as the pipeline's YAML says"]),
    ({"seed": 7, "top_p": 0.5}, "seed", ["'seed'", "'top_p'", "seed: 7", "top_p: 0.5"]),
    ({"extra_body": {"parallel_tool_calls": True}}, "parallel_tool_calls", ["'parallel_tool_calls'"]),
])
def test_fields_the_pipeline_cannot_honour_are_refused_naming_them(client, openapi, extra, param, words):
    """Before, each was accepted and the answer came as if it had not been sent (a tool list, a JSON format,
    log-probabilities, a sampling temperature): the client could not tell."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}], **extra)
    error = caught.value
    assert error.code == "unsupported_parameter" and error.param == param, error.body
    assert all(word in error.message for word in words), error.message
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, {"error": error.body})


def test_a_field_openai_does_not_have_is_refused_with_the_nearest_name(client, openapi):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}],
                                       extra_body={"max_token": 5})
    error = caught.value
    assert error.code == "unknown_parameter" and error.param == "max_token", error.body
    assert "Did you mean 'max_tokens'" in error.message, error.message
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, {"error": error.body})


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_a_number_json_does_not_have_is_malformed_json_on_both_routes(url, openapi, number):
    """Python's JSON reader takes NaN and infinities (and 1e999 as infinity); JSON has none of them."""
    chat = httpx.post(f"{url}/v1/chat/completions", timeout=30, headers={"content-type": "application/json"},
                      content=b'{"model": "closed_book", "messages": [{"role": "user", "content": "Who?"}], '
                              b'"max_tokens": ' + number + b"}")
    assert chat.status_code == 400 and chat.json()["error"]["code"] == "malformed_json", chat.text
    assert number.decode().lstrip("-") in chat.json()["error"]["message"]
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, chat.json())
    run = httpx.post(f"{url}/{MODEL}/run", timeout=30, headers={"content-type": "application/json"},
                     content=b'{"query": "Who?", "score": ' + number + b"}")
    assert run.status_code == 400 and run.json()["error"] == "malformed_json", run.text
    assert_documented(openapi, f"/{MODEL}/run", "POST", 400, run.json())


def test_transport_errors_are_openai_shaped_too(client, url, openapi):
    with pytest.raises(openai.APIStatusError) as caught:  # over --max-body-bytes
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * (MAX_BODY + 1)}])
    assert caught.value.status_code == 413 and caught.value.code == "request_too_large"
    assert_documented(openapi, "/v1/chat/completions", "POST", 413, {"error": caught.value.body})
    malformed = httpx.post(f"{url}/v1/chat/completions", content=b'{"model": ', timeout=30,
                           headers={"content-type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "malformed_json"
    assert_documented(openapi, "/v1/chat/completions", "POST", 400, malformed.json())
    big_get = httpx.request("GET", f"{url}/v1/models", content=b"x" * (MAX_BODY + 1), timeout=30)
    assert big_get.status_code == 413
    assert_documented(openapi, "/v1/models", "GET", 413, big_get.json())
    for method, path, status in [("GET", "/v1/chat/completions", 405), ("POST", "/v1/models", 405),
                                 ("POST", "/v1/embeddings", 404), ("POST", "/v1/responses", 404)]:
        response = httpx.request(method, f"{url}{path}", timeout=30)
        assert response.status_code == status, (method, path)
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}, response.json()
    with pytest.raises(openai.NotFoundError):  # an OpenAI API the server does not have
        client.embeddings.create(model=MODEL, input="x")


def test_the_run_route_is_unchanged(url, run_answer):
    assert httpx.post(f"{url}/{MODEL}/run", json={"query": FRANCE}, timeout=300).json() == {
        "result": {"replies": [run_answer]}}
    refused = httpx.post(f"{url}/{MODEL}/run", json={}, timeout=30)
    assert refused.status_code == 422 and refused.json()["error"] == "invalid_request"
    assert set(refused.json()) == {"error", "reason", "status"}
    assert httpx.get(f"{url}/status", timeout=30).status_code == 200


def test_the_wrapper_answers_hayhooks_chat_convention(server, completion):
    """`run_chat_completion` (hayhooks' BasePipelineWrapper hook): a string, or StreamingChunks when streaming."""
    wrapper = server[1].state.icr2_wrapper
    reference = completion.parse().choices[0].message.content
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": FRANCE}]
    assert wrapper.run_chat_completion(MODEL, messages, {}) == reference
    chunks = list(wrapper.run_chat_completion(MODEL, messages, {"stream": True}))
    assert "".join(chunk.content for chunk in chunks) == reference and len(chunks) > 2
    assert chunks[-1].finish_reason in ("stop", "length") and chunks[-1].meta["usage"]["completion_tokens"] > 0
    assert wrapper.streaming_components == ["reader"]
    # what hayhooks forwards in `body` is checked as the chat route checks it, not ignored
    from icr2_components.serving.openai_models import ChatRequestRefused

    for body, param in (({"max_tokens": True}, "max_tokens"), ({"tools": [WEATHER_TOOL]}, "tools")):
        with pytest.raises(ChatRequestRefused) as caught:
            wrapper.run_chat_completion(MODEL, messages, body)
        assert caught.value.param == param


def test_other_declared_inputs_are_request_fields_and_other_outputs_come_back(tmp_path):
    """The oracle's gold passages travel as its declared input `documents` (the client's extra_body), checked as on
    its run route; a pipeline declaring more outputs than `replies` (here the oracle with its prompt's passage ids
    declared too) answers them under `icr2_outputs`, streamed on the last chunk."""
    oracle = tmp_path / "oracle_ids.yaml"
    text = (ROOT / "pipelines" / "oracle.yaml").read_text()
    oracle.write_text(text.replace("  replies: reader.replies",
                                   "  replies: reader.replies\n  passage_ids: prompt.passage_ids"))
    with serving(oracle, max_new_tokens=16) as (url, _):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        openapi = httpx.get(f"{url}/openapi.json", timeout=30).json()
        passages = [{"content": "Zorbania's capital is the city of Quelport.", "meta": {"title": "Zorbania"}}]
        question = [{"role": "user", "content": "What is the capital of Zorbania?"}]
        raw = client.chat.completions.with_raw_response.create(model="oracle_ids", messages=question,
                                                               extra_body={"documents": passages})
        answer = raw.parse()
        run = httpx.post(f"{url}/oracle_ids/run", json={"query": question[0]["content"], "documents": passages},
                         timeout=300).json()["result"]
        assert answer.choices[0].message.content == run["replies"][0]
        assert "Quelport" in answer.choices[0].message.content
        assert answer.model_extra["icr2_outputs"] == {"passage_ids": run["passage_ids"]} and run["passage_ids"]
        assert_documented(openapi, "/v1/chat/completions", "POST", 200, json.loads(raw.content))
        chunks = list(client.chat.completions.create(model="oracle_ids", messages=question, stream=True,
                                                     extra_body={"documents": passages}))
        last = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
        assert last.model_extra["icr2_outputs"] == {"passage_ids": run["passage_ids"]}
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == run["replies"][0]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="oracle_ids", messages=question)
        assert caught.value.param == "documents" and "Field required" in caught.value.message
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="oracle_ids", messages=question,
                                           extra_body={"documents": [{"text": "no content"}]})
        assert caught.value.param == "documents.0.content", caught.value.body


def test_a_reader_that_cannot_stream_sends_its_whole_answer_in_one_chunk(server, client, completion, monkeypatch):
    """Without a streaming reader (here: the wrapper told it has none) the stream is the role, the whole answer as
    one piece, the finish reason and [DONE], and the answer is the same."""
    monkeypatch.setattr(server[1].state.icr2_wrapper, "streaming_components", [])
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}],
                                                 stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert pieces == [completion.parse().choices[0].message.content]
    assert chunks[-1].choices[0].finish_reason == completion.parse().choices[0].finish_reason


def test_a_failure_after_the_stream_started_is_an_error_event_the_client_raises(client, url, monkeypatch):
    """The headers are sent once the first token is out, so a later failure is a `data: {"error": ...}` event
    (no [DONE]); the openai client raises it as APIError. The failure is simulated inside the reader, after it
    streamed one piece, as a device failure would happen."""
    from haystack.dataclasses import StreamingChunk

    from icr2_components.readers.local_chat_reader import LocalChatReader

    @functools.wraps(LocalChatReader.run)  # Haystack reads the sockets from run's signature
    def fails_midway(self, messages, max_new_tokens=None, streaming_callback=None):
        if streaming_callback is not None:
            streaming_callback(StreamingChunk(content="Par"))
        raise RuntimeError("simulated device failure")

    monkeypatch.setattr(LocalChatReader, "run", fails_midway)
    received = []
    with pytest.raises(openai.APIError, match="simulated device failure") as caught:
        for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}],
                                                    stream=True):
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "Par"] and caught.value.code == "pipeline_failed"
    _, events = stream_events(url, {"model": MODEL, "messages": [{"role": "user", "content": FRANCE}],
                                    "stream": True})
    assert json.loads(events[-1])["error"]["type"] == "server_error" and "[DONE]" not in events
    with pytest.raises(openai.InternalServerError, match="simulated device failure") as caught:  # not streamed
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": FRANCE}])
    assert caught.value.code == "pipeline_failed" and caught.value.status_code == 500


# -- a server that pushes back: a full queue, a client too slow, a request past its time limit ----------------


QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "How many legs does a spider have?",
             "What is the largest planet?", "Who painted the Mona Lisa?", "What is the boiling point of water?",
             "Who discovered penicillin?", "What is the capital of Japan?"]


def test_a_full_queue_answers_429_with_retry_after_and_every_admitted_request_is_answered():
    """8 clients at once against 1 run and 2 waiting: before, all 8 queued without bound (the last waited 76 s for
    20 clients, and memory grew with the queue)."""
    from concurrent.futures import ThreadPoolExecutor

    with serving(ROOT / "pipelines" / "closed_book.yaml", max_new_tokens=8, concurrency=1, max_queue=2) as (url, _):
        spec = httpx.get(f"{url}/openapi.json", timeout=30).json()

        def ask(question: str) -> httpx.Response:
            return httpx.post(f"{url}/{MODEL}/run", json={"query": question}, timeout=300)

        with ThreadPoolExecutor(len(QUESTIONS)) as pool:
            responses = list(pool.map(ask, QUESTIONS))
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 429}, [(r.status_code, r.text) for r in responses]
        assert statuses.count(200) >= 3 and statuses.count(429) >= 1, statuses  # 1 running + 2 waiting admitted
        for response in responses:
            if response.status_code == 429:
                assert response.json()["error"] == "server_busy" and int(response.headers["retry-after"]) >= 1
                assert_documented(spec, f"/{MODEL}/run", "POST", 429, response.json())
            else:
                assert response.json()["result"]["replies"][0].strip()  # no admitted request lost
        # OpenAI-shaped on the chat route, which the openai client retries after Retry-After
        with ThreadPoolExecutor(6) as pool:
            chats = list(pool.map(lambda q: httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
                "model": MODEL, "messages": [{"role": "user", "content": q}]}), QUESTIONS[:6]))
        busy = [c for c in chats if c.status_code == 429]
        assert busy and all(c.status_code == 200 for c in chats if c not in busy)
        assert (
            busy[0].json()["error"]["code"] == "server_busy" and busy[0].json()["error"]["type"] == "rate_limit_error"
        )
        assert_documented(spec, "/v1/chat/completions", "POST", 429, busy[0].json())
        # the places are given back once the answers are out
        assert ask(FRANCE).status_code == 200


def read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection. A trickling client's byte can cross the server's
    close: Linux then answers that byte with a reset, which recv reports after the data already received (a CI run
    failed on it). A reset ends the read only once an answer has come; a reset before any answer still fails."""
    data = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except ConnectionResetError:
            if not data:
                raise
            return data
        if not chunk:
            return data
        data += chunk


def trickle(url: str, declared: int, pause_s: float | None) -> tuple[bytes, float, int]:
    """A real slow client on a socket: the headers of a POST declaring ``declared`` body bytes, then one byte
    every ``pause_s`` seconds (None: nothing at all) until the server answers. Returns (what the server sent,
    seconds from the end of the headers to the server's answer, body bytes sent)."""
    import select

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(f"POST /{MODEL}/run HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {declared}\r\n\r\n".encode())
        started, sent = time.monotonic(), 0
        while not select.select([connection], [], [], pause_s if pause_s is not None else 60)[0]:
            if pause_s is not None and sent < declared - 1:  # never the last byte: the body stays incomplete
                connection.sendall(b" ")
                sent += 1
        answered = time.monotonic() - started
        return read_until_closed(connection), answered, sent


def test_a_client_that_trickles_its_body_is_cut_off_at_the_whole_body_limit():
    """A byte every 0.5 s, each pause far inside the limit: before, the limit applied to each pause, so such a
    client held its connection (and a pipeline place) for as long as it liked (157 s at a byte every 8 s); now the
    whole body must arrive within --body-timeout of the headers. A client that never sends is cut off alike."""
    with serving(ROOT / "pipelines" / "closed_book.yaml", max_new_tokens=8, body_timeout=3.0) as (url, _):
        for pause_s in (0.5, None):
            data, answered, sent = trickle(url, declared=1000, pause_s=pause_s)
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.split()[1] == b"408", data
            assert json.loads(body)["error"] == "request_timeout" and "3 s" in json.loads(body)["reason"]
            assert b"connection: close" in head.lower()
            assert 2.9 < answered < 6, answered  # at the whole-body limit, not after the last pause
            assert (sent >= 4) if pause_s else sent == 0  # it was sending all along
        assert httpx.get(f"{url}/status", timeout=30).status_code == 200


def declare_and_stall(url: str, path: str, headers: str, first: bytes) -> tuple[int, dict, float, float]:
    """A real client on a socket that sends the headers of a POST and ``first`` body bytes, then nothing. Returns
    (status, JSON body, seconds from the end of the headers to the whole answer, seconds to the server's close)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                           f"{headers}\r\n".encode())
        started = time.monotonic()
        connection.sendall(first)
        data, answered = b"", None
        while True:
            try:
                chunk = connection.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"content-length: (\d+)", head.lower())
            if answered is None and length and len(body) >= int(length.group(1)):
                answered = time.monotonic() - started
        closed = time.monotonic() - started
    head, _, body = data.partition(b"\r\n\r\n")
    assert answered is not None, data
    return int(head.split()[1]), json.loads(body), answered, closed


def test_a_body_declared_over_the_limit_is_refused_at_once_and_the_connection_closed_at_the_body_deadline():
    """A client declaring 10 MB and sending one byte: before, the server read on for the rest of the body and held
    the connection open past every time limit. Now the declared length is refused at once, before any of it is
    read, and what the client might still send is taken only until --body-timeout; a chunked body that crosses
    the limit and stalls is refused the same way."""
    with serving(ROOT / "pipelines" / "closed_book.yaml", max_new_tokens=8, body_timeout=3.0,
                 max_body_bytes=1000) as (url, _):
        cases = [(f"/{MODEL}/run", "Content-Length: 10000000\r\n", b"{"),
                 ("/v1/chat/completions", "Content-Length: 10000000\r\n", b"{"),
                 (f"/{MODEL}/run", "Transfer-Encoding: chunked\r\n", b"5dc\r\n" + b" " * 1500 + b"\r\n")]
        for path, headers, first in cases:
            status, body, answered, closed = declare_and_stall(url, path, headers, first)
            assert status == 413, (path, body)
            error = body["error"]["code"] if path.startswith("/v1") else body["error"]
            assert error == "request_too_large", body
            assert answered < 1.5, (path, answered)  # at once, not at the deadline
            assert 2.5 < closed < 6, (path, closed)  # closed at the body deadline, not held open
        assert httpx.get(f"{url}/status", timeout=30).status_code == 200


def request_guard(app):
    """The app's RequestGuard middleware instance (built with the app's middleware stack on its first request)."""
    from icr2_components.serving.app import RequestGuard

    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, RequestGuard):
        layer = getattr(layer, "app", None)
    return layer


def test_a_request_not_answered_within_the_request_timeout_gets_504_and_the_server_goes_on():
    """The real SmolLM2 asked for 16 new tokens (about half a second of work on an idle CPU) with a 0.05 s limit on
    the whole request: answered 504 at the limit, while the run keeps its place until it really ends."""
    with serving(ROOT / "pipelines" / "closed_book.yaml", max_new_tokens=16, body_timeout=0.05,
                 request_timeout=0.05) as (url, app):
        for path, body in ((f"/{MODEL}/run", {"query": "Write a long story about a dragon who bakes bread."}),
                           ("/v1/chat/completions", {"model": MODEL, "messages": [
                               {"role": "user", "content": "Write a long story about a dragon who bakes bread."}]})):
            started = time.monotonic()
            response = httpx.post(f"{url}{path}", json=body, timeout=120)
            elapsed = time.monotonic() - started
            assert response.status_code == 504, response.text
            error = response.json()["error"]
            if path.startswith("/v1"):
                assert error["code"] == "run_timeout" and "0.05 s" in error["message"]
            else:
                assert error == "run_timeout" and "0.05 s" in response.json()["reason"]
            assert response.headers["connection"] == "close" and elapsed < 5, elapsed
            guard = request_guard(app)
            assert guard.admitted == 1  # the run goes on in its thread, and holds its place
            deadline = time.monotonic() + 600
            while guard.admitted and time.monotonic() < deadline:
                time.sleep(0.2)
            assert guard.admitted == 0
        assert httpx.get(f"{url}/status", timeout=30).status_code == 200


@pytest.mark.parametrize(("options", "words"), [
    ({"body_timeout": 0}, "body_timeout must be a number of seconds above 0"),
    ({"request_timeout": float("nan")}, "request_timeout must be a number of seconds above 0"),
    ({"request_timeout": 10**9}, "at most 86400"),
    ({"body_timeout": 20.0, "request_timeout": 10.0}, "must not exceed request_timeout"),
])
@pytest.mark.unit
def test_time_limits_out_of_range_are_refused_before_loading(options, words):
    from icr2_components.serving import create_serving_app

    with pytest.raises(ValueError, match=words):
        create_serving_app(str(ROOT / "pipelines" / "closed_book.yaml"), **options)
