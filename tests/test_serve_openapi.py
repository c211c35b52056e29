"""The 200 body `icr2 serve` documents, per pipeline, from the declared outputs and their sockets (no server, no
model run): concrete types (a reply is a string, a passage is {id, content, score, meta}), nothing undeclared, and
null only where a branch may not run. The served schema itself is checked against real answers in test_serve.py."""

import asyncio
import json
from pathlib import Path

import numpy
import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage
from jsonschema import Draft202012Validator

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def result_validator(pipeline: str) -> Draft202012Validator:
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving.response_model import build_result_model

    model = build_result_model(PipelineSpec.from_file(str(ROOT / "pipelines" / pipeline)))
    return Draft202012Validator(model.model_json_schema())


def test_a_linear_pipeline_documents_each_output_concretely_and_never_null():
    from icr2_components.serving.pipeline_wrapper import to_json

    validator = result_validator("vanilla_rag.yaml")
    schema = validator.schema
    assert schema["required"] == ["replies", "documents"] and schema["additionalProperties"] is False
    passage = Document(content="Paris is the capital of France.", meta={"title": "Paris", "wikipedia_id": "1"},
                       score=0.5)
    answer = to_json({"replies": [ChatMessage.from_assistant("Paris")], "documents": [passage]})
    assert validator.is_valid(answer), list(validator.iter_errors(answer))
    assert answer["documents"][0] == {"id": passage.id, "content": passage.content, "score": 0.5,
                                      "meta": {"title": "Paris", "wikipedia_id": "1"}}
    assert validator.is_valid(to_json({"replies": [], "documents": [Document(content="x")]}))  # score null
    dense = to_json({"replies": ["a"], "documents": [Document(content="x", score=numpy.float32(0.25))]})
    assert dense["documents"][0]["score"] == 0.25 and validator.is_valid(dense)  # a number, not its repr
    for wrong in ({"replies": None, "documents": []},                       # linear: always there
                  {"replies": ["a"]},                                         # a declared output missing
                  {"replies": ["a"], "documents": [], "rap_report": {}},      # an undeclared one
                  {"replies": [{"role": "assistant"}], "documents": []},      # a reply is its text
                  {"replies": ["a"], "documents": [{"content": "x"}]},        # a passage has id, score, meta
                  {"replies": ["a"], "documents": [{**answer["documents"][0], "embedding": [0.1]}]}):
        assert not validator.is_valid(wrong), wrong


def test_outputs_behind_a_branching_gate_are_documented_nullable():
    validator = result_validator("adaptive_rag.yaml")  # the gate sends the query down one of two branches
    assert validator.is_valid({"replies": ["Paris"], "decision": {"retrieve": True}})
    assert validator.is_valid({"replies": None, "decision": None})
    assert not validator.is_valid({"replies": [3], "decision": {}})
    assert not validator.is_valid({"replies": ["Paris"], "decision": "retrieve"})


def test_each_status_documents_exactly_its_error_kinds():
    from icr2_components.serving.app import RUN_ERRORS
    from icr2_components.serving.refusals import CLIENT_ERRORS
    from icr2_components.serving.response_model import error_model

    # every refusal the pipeline errors map to is documented under its status
    for status, kind in CLIENT_ERRORS.values():
        assert kind in RUN_ERRORS[status]
    validator = Draft202012Validator(error_model("RunError413", 413, RUN_ERRORS[413]).model_json_schema())
    assert validator.is_valid({"error": "context_too_long", "reason": "…accepts 8160", "status": 413})
    assert not validator.is_valid({"error": "invalid_request", "reason": "x", "status": 413})
    assert not validator.is_valid({"error": "context_too_long", "reason": "x", "status": 422})
    assert not validator.is_valid({"detail": [{"loc": ["body"], "msg": "x"}]})


@pytest.mark.parametrize("value", [b"abc", b"12x", b""])
def test_request_guard_answers_a_non_integer_content_length_as_json(value):
    """Behind uvicorn the HTTP parser refuses these first (test_serve.py); another ASGI server may pass them on."""
    from icr2_components.serving.app import RequestGuard

    async def never_called(scope, receive, send):
        raise AssertionError("the app must not see the request")

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    guard = RequestGuard(never_called, allowed_paths={"/x/run"}, max_body_bytes=100)
    asyncio.run(guard({"type": "http", "path": "/x/run", "headers": [(b"content-length", value)]}, receive, send))
    assert sent[0]["status"] == 400 and (b"content-type", b"application/json") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {"error": "bad_request", "reason": "Content-Length is not an integer",
                                           "status": 400}


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
def test_both_uvicorn_parsers_answer_a_bad_content_length_as_json(implementation):
    """The 400 uvicorn's parser sends before any app code runs, with either parser uvicorn may pick."""
    import socket
    import threading
    import time

    import uvicorn

    from icr2_components.serving.app import json_error_http_protocol

    async def app(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off",
                                           http=json_error_http_protocol(implementation)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(b"POST /x/run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n{}")
            data = b""
            while chunk := connection.recv(65536):
                data += chunk
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), data
    payload = json.loads(body)
    assert payload["error"] == "bad_request" and payload["status"] == 400
    assert "content-length" in payload["reason"].lower(), payload


def test_every_refusal_has_a_documented_openai_code():
    """Each error a chat request can get, from the run route's catalogue or a refusal, maps to a code its OpenAI
    status documents (a prompt over the context: 400 context_length_exceeded, as OpenAI answers it)."""
    from icr2_components.serving.app import RUN_ERRORS
    from icr2_components.serving.openai_models import ICR2_TO_OPENAI, OPENAI_CHAT_ERRORS, openai_error
    from icr2_components.serving.refusals import CLIENT_ERRORS

    kinds = {kind for kinds in RUN_ERRORS.values() for kind in kinds} | {kind for _, kind in CLIENT_ERRORS.values()}
    for kind in kinds | {"model_not_found"}:
        status, code = ICR2_TO_OPENAI[kind]
        assert code in OPENAI_CHAT_ERRORS[status], (kind, status, code)
    status, body = openai_error(413, "context_too_long", "The prompt has 9000 tokens but m accepts 8160")
    assert status == 400 and body == {"error": {"message": "The prompt has 9000 tokens but m accepts 8160",
                                                "type": "invalid_request_error", "param": None,
                                                "code": "context_length_exceeded"}}
    assert openai_error(500, "pipeline_failed", "x")[1]["error"]["type"] == "server_error"


def test_the_chat_request_carries_the_other_declared_inputs_typed_as_on_the_run_route():
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving.openai_models import build_chat_request_model
    from icr2_components.serving.request_model import build_request_model

    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / "oracle.yaml"))
    model = build_chat_request_model(spec, build_request_model(spec))
    schema = model.model_json_schema()
    assert set(schema["required"]) == {"model", "messages", "documents"} and "query" not in schema["properties"]
    body = {"model": "oracle", "messages": [{"role": "user", "content": "q"}], "temperature": 0.5,
            "documents": [{"content": "Paris is the capital of France.", "meta": {"title": "Paris"}}]}
    parsed = model.model_validate(body)
    assert parsed.documents[0].content.startswith("Paris") and parsed.model_extra == {"temperature": 0.5}
    for wrong in ({**body, "documents": []}, {**body, "documents": [{"text": "x"}]}, {**body, "messages": []},
                  {**body, "n": 2}, {**body, "max_tokens": 0}):
        with pytest.raises(ValueError):
            model.model_validate(wrong)


def test_the_completion_documents_the_other_declared_outputs_only_where_there_are_some():
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving.openai_models import build_chat_response_models
    from icr2_components.serving.response_model import build_result_model

    def models(name):
        spec = PipelineSpec.from_file(str(ROOT / "pipelines" / name))
        return build_chat_response_models(spec, build_result_model(spec))

    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "usage": None,
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop",
                           "logprobs": None}]}
    closed_book, _ = models("closed_book.yaml")
    closed = Draft202012Validator(closed_book.model_json_schema())
    assert closed.is_valid(answer)
    assert not closed.is_valid({**answer, "icr2_outputs": {}})
    assert not closed.is_valid({**answer, "choices": []})
    assert not closed.is_valid({**answer, "usage": {"prompt_tokens": 1}})
    vanilla, chunk = models("vanilla_rag.yaml")
    passage = {"id": "1", "content": "Paris is the capital of France.", "score": 0.5, "meta": {}}
    with_documents = Draft202012Validator(vanilla.model_json_schema())
    assert with_documents.is_valid({**answer, "icr2_outputs": {"documents": [passage]}})
    assert not with_documents.is_valid(answer)
    chunks = Draft202012Validator(chunk.model_json_schema())
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    assert chunks.is_valid({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "finish_reason": None}]})
    assert chunks.is_valid({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                            "icr2_outputs": {"documents": [passage]}})
    assert chunks.is_valid({**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                             "total_tokens": 5}})
    assert not chunks.is_valid({**base, "choices": [{"index": 0, "delta": {"content": 3}, "finish_reason": None}]})


def test_the_query_is_the_last_user_message_text():
    from icr2_components.serving.openai_models import ChatRequestRefused, query_from_messages

    assert query_from_messages([{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
                                {"role": "assistant", "content": "a"}, {"role": "user", "content": "second"},
                                {"role": "assistant", "content": "prefill"}]) == (3, "second")
    assert query_from_messages([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                             {"type": "text", "text": "b"}]}]) == (0, "a\nb")
    with pytest.raises(ChatRequestRefused, match="no user message") as caught:
        query_from_messages([{"role": "system", "content": "s"}])
    assert caught.value.param == "messages" and caught.value.status_code == 422
    with pytest.raises(ChatRequestRefused, match="not text") as caught:
        query_from_messages([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}])
    assert caught.value.param == "messages[0].content"


@pytest.mark.parametrize("pipeline, streamers", [
    ("closed_book.yaml", ["reader"]),
    ("adaptive_rag.yaml", ["closed_book_reader", "rag_reader"]),  # two branches behind a joiner; the gate is not
    ("cmt_multi_agent.yaml", ["reader"]),
])
def test_the_readers_that_write_the_answer_are_the_ones_streamed(pipeline, streamers):
    from icr2_components.pipeline_spec import PipelineSpec
    from icr2_components.serving.pipeline_wrapper import reply_streamers

    spec = PipelineSpec.from_file(str(ROOT / "pipelines" / pipeline))
    assert reply_streamers(spec.pipeline(controlled=False), spec.outputs["replies"]) == streamers
