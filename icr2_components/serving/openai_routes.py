"""``icr2 serve`` as an OpenAI-compatible server: each served pipeline is a model, by its name.

Routes (with hayhooks' aliases without ``/v1``, as its OpenAI router has them):

* ``GET /v1/models`` (``/models``): ``{"object": "list", "data": [{"id": "<pipeline name>", "object": "model",
  "created", "owned_by": "icr2_components"}, ...]}``, one entry per served pipeline;
* ``POST /v1/chat/completions`` (``/chat/completions``): ``model`` must be a served pipeline's name (else 404
  ``model_not_found``), and that pipeline answers; the text of the LAST user message is the pipeline's ``query``
  and its other declared inputs are top-level fields (``documents`` for the oracle: the openai client's
  ``extra_body``). The pipelines declare no chat-history input, so earlier turns and system messages are not used:
  the
  ``x-icr2-ignored-messages`` header counts them, ``x-icr2-query-message`` is the index of the message used, and
  ``x-icr2-ignored-fields`` names the request fields accepted and not used (``user``, ``metadata``...: none that
  changes the answer). A field the pipeline cannot honour (``tools``, ``response_format``, ``logprobs``,
  ``temperature``...: each reader decodes as its YAML says) is refused 400 ``unsupported_parameter``, and one
  OpenAI does not have either 400 ``unknown_parameter``, naming it (``openai_models.check_request_fields``).
  ``max_completion_tokens`` / ``max_tokens`` lower the readers' answer budget.
  The answer is a ``chat.completion`` (``usage`` from the reader's reply meta; ``icr2_outputs``: the other
  declared outputs, e.g. ``documents``), or with ``stream: true`` server-sent ``chat.completion.chunk`` events:
  a first chunk with the role, the reader's text pieces as it generates them (``LocalChatReader`` streams;
  a reader that cannot gives its whole answer as one piece), a last chunk with ``finish_reason``, with
  ``stream_options.include_usage`` a usage chunk, then ``data: [DONE]``.

Errors are OpenAI's ``{"error": {"message", "type", "param", "code"}}`` so that the openai client raises its own
exceptions (``NotFoundError``, ``BadRequestError``...): a prompt over the reader's context is 400
``context_length_exceeded`` (413 ``context_too_long`` on ``POST /<name>/run``), a body over --max-body-bytes 413.
An error once a stream has started (a pipeline failure after the first token) is one ``data: {"error": ...}``
event, which the openai client raises as ``APIError``; the stream then ends without ``[DONE]``.

Usage example (a server started with ``icr2 serve pipelines/closed_book.yaml``):
```python
from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:1416/v1", api_key="unused")
print([model.id for model in client.models.list()])                # ['closed_book']
completion = client.chat.completions.create(
    model="closed_book", messages=[{"role": "user", "content": "What is the capital of France?"}])
print(completion.choices[0].message.content, completion.usage)
for chunk in client.chat.completions.create(model="closed_book", stream=True,
                                            messages=[{"role": "user", "content": "Name three colours."}]):
    print(chunk.choices[0].delta.content or "", end="", flush=True)
```
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any, Union

from fastapi import FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, ValidationError, create_model

from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.serving.ab_split import ABSplit
from icr2_components.serving.observation import current as current_observation
from icr2_components.serving.openai_models import (
    OPENAI_CHAT_ERRORS,
    OPENAI_MODELS_ERRORS,
    OWNED_BY,
    ChatCompletionRequest,
    ChatRequestRefused,
    ModelList,
    build_chat_request_model,
    build_chat_response_models,
    check_request_fields,
    openai_error,
    openai_error_model,
    query_from_messages,
)
from icr2_components.serving.pipeline_wrapper import ChatAnswer, DeclaredPipelineWrapper
from icr2_components.serving.pipelines import ServedPipeline
from icr2_components.serving.refusals import RequestRefused
from icr2_components.serving.response_model import error_model

MODELS_PATHS = ("/v1/models", "/models")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
OPENAI_PATHS = frozenset(MODELS_PATHS + CHAT_PATHS)
SSE_DATA_KEY = "x-event-data"  # the media type's extension naming the schema of each event's data

logger = logging.getLogger(__name__)
# uvicorn's HTTP parser refuses some requests (`Content-Length: abc`) before any route is known: that 400 is the
# server-wide `{"error": "bad_request", "reason", "status"}` on every path (app.json_error_http_protocol)
PARSER_400 = error_model("HttpParserError400", 400, {"bad_request": "uvicorn's HTTP parser refused the request "
                                                                    "before routing (the connection is closed)"})


def is_openai_path(path: str) -> bool:
    """Errors on these paths are OpenAI-shaped: the OpenAI routes, and any other path under /v1/ (a 404)."""
    return path in OPENAI_PATHS or path.startswith("/v1/")


def _responses(prefix: str, catalogue: dict[int, dict[str, str]]) -> dict[int | str, dict[str, Any]]:
    responses = {}
    for status, codes in catalogue.items():
        model: Any = openai_error_model(f"{prefix}Error{status}", status, codes)
        description = " | ".join(f"{code}: {when}" for code, when in codes.items())
        if status == 400:
            model = Union[model, PARSER_400]  # noqa: UP007 - a type object FastAPI documents as anyOf
            description += (" | a request uvicorn's HTTP parser refuses (before routing) is answered in the "
                            "server-wide shape `{\"error\": \"bad_request\", \"reason\", \"status\"}`")
        responses[status] = {"model": model, "description": description}
    return responses


_HEADERS = {
    "x-icr2-query-message": "the index in `messages` of the user message whose text was the query",
    "x-icr2-ignored-messages": "how many messages the pipeline did not see (every one but the query: the "
                               "pipeline declares no chat-history input)",
    "x-icr2-ignored-fields": "the request fields the server accepted but does not use, comma-separated (empty "
                             "when none): OpenAI's that do not change the answer (`user`, `metadata`...) and those "
                             "given the value that asks for nothing (`tools: []`)",
}


CHAT_DESCRIPTION = (
    "OpenAI's chat completion, answered by the pipeline. The text of the LAST user message is the pipeline's "
    "`query`; its other declared inputs are top-level fields. The pipeline declares no chat-history input, so the "
    "other messages are not used (`x-icr2-ignored-messages` counts them). An OpenAI field the pipeline cannot "
    "honour (`tools`, `response_format`, `logprobs`, `temperature`, `top_p`...: each reader decodes as its YAML "
    "says) is refused 400 `unsupported_parameter` unless null or the value that asks for nothing (`tools: []`, "
    "`logprobs: false`); a field OpenAI does not have either is refused 400 `unknown_parameter`; OpenAI's fields "
    "that do not change the answer (`user`, `metadata`...) are accepted and named in `x-icr2-ignored-fields`. "
    "`stream: true` answers server-sent `chat.completion.chunk` events: the "
    "reader's tokens as it generates them (the whole answer in one chunk when it cannot stream), then `data: "
    "[DONE]`. Errors are OpenAI's `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`."
)


def add_openai_routes(app: FastAPI, served: dict[str, ServedPipeline], ab: ABSplit | None = None) -> dict[str, Any]:
    """Add the model list and chat completion routes for the ``served`` pipelines (each a model, by its name);
    return the schemas to add to ``/openapi.json``'s components (the streamed chunks, which no route returns as
    JSON).

    One pipeline: the chat body is that pipeline's request model, as before. Several: the body carries the other
    declared inputs of every pipeline (each optional there), and a field the chosen model's pipeline does not
    declare is refused 400 ``unknown_parameter``; the chosen pipeline's own request model then checks the rest.

    ``ab``: one more model, answered by one of its arms per request (``serving.ab_split``: sticky by the request's
    ``user`` or ``X-ICR2-User``); the answer's ``model`` names the arm that answered.

    :raises ValueError: an arm of ``ab`` is not served, or its model name is a served pipeline's.
    """
    if ab is not None and (ab.model in served or any(arm not in served for arm, _ in ab.arms)):
        raise ValueError(f"the A/B model {ab.model!r} must be a new name over served pipelines; arms "
                         f"{[arm for arm, _ in ab.arms]}, served {list(served)}.")
    chats: dict[str, tuple[ServedPipeline, type[BaseModel]]] = {}
    chunk_schemas: dict[str, Any] = {}
    completions: list[type[BaseModel]] = []
    for name, pipeline in served.items():
        completion_model, chunk_model = build_chat_response_models(pipeline.spec, pipeline.wrapper.result_model)
        chats[name] = (pipeline, completion_model)
        completions.append(completion_model)
        chunk_schemas[chunk_model.__name__] = chunk_model.model_json_schema(
            ref_template="#/components/schemas/{model}")
    first = next(iter(served.values()))
    if len(served) == 1:
        chat_request = build_chat_request_model(first.spec, first.request_model)
    else:
        chat_request = combined_chat_request_model(served)
    created = int(time.time())
    models = ModelList(object="list", data=[{"id": name, "object": "model", "created": created,
                                             "owned_by": OWNED_BY} for name in [*served, *([ab.model] if ab else [])]])
    names = ", ".join(served)
    serving = repr(first.name) if len(served) == 1 else str(list(served))

    async def list_models() -> ModelList:
        return models

    async def chat_completions(body) -> Any:
        chosen, used = chats.get(body.model), ()
        if chosen is None and ab is not None and body.model == ab.model:
            chosen = chats[ab_arm(ab, body)]
            user = (body.model_extra or {}).get("user")
            used = ("user",) if isinstance(user, str) and user else ()  # it picked the arm: not an ignored field
        if chosen is None:
            raise ChatRequestRefused(404, "model_not_found", f"The model {body.model!r} does not exist on this "
                                     f"server; it serves {serving} (GET /v1/models).", param="model")
        pipeline, completion_model = chosen
        if len(served) > 1:
            # OpenAI's extra fields (`user`, `metadata`...) are checked by check_request_fields, not here
            foreign = sorted(field for field in body.model_fields_set
                             if field not in ChatCompletionRequest.model_fields and field not in pipeline.spec.inputs
                             and field not in (body.model_extra or {}))
            if foreign:
                raise ChatRequestRefused(400, "unknown_parameter", f"{foreign[0]!r} is not an input of the model "
                                         f"{body.model!r} (it declares {sorted(pipeline.spec.inputs)}).",
                                         param=foreign[0])
        return await _chat(pipeline.spec, pipeline.wrapper, pipeline.request_model, completion_model, body, used)

    chat_completions.__annotations__ = {"body": chat_request, "return": Any}  # a model built per pipeline

    for index, path in enumerate(MODELS_PATHS):
        app.add_api_route(path, list_models, methods=["GET"], response_model=ModelList, tags=["openai"],
                          operation_id="openai_models" + ("_alias" if index else ""),
                          summary="List models: the served pipelines" + (" (alias of /v1/models)" if index else ""),
                          responses=_responses("OpenAIModels", OPENAI_MODELS_ERRORS))
    refs = " or ".join(f"<{name}>" for name in chunk_schemas)
    ok = {"description": f"a `chat.completion`, or with `stream: true` server-sent events: `data: {refs}` per "
                         "chunk, then `data: [DONE]`",
          "headers": {name: {"description": text, "schema": {"type": "string"}} for name, text in _HEADERS.items()},
          "content": {"text/event-stream": {
              "schema": {"type": "string", "description": "`data: <JSON chunk>\\n\\n` events, the last `data: "
                                                          "[DONE]`; an error after the stream started is one "
                                                          "`data: {\"error\": ...}` event and no [DONE]"},
              SSE_DATA_KEY: ({"$ref": f"#/components/schemas/{next(iter(chunk_schemas))}"} if len(chunk_schemas) == 1
                             else {"anyOf": [{"$ref": f"#/components/schemas/{name}"} for name in chunk_schemas]})}}}
    response_model: Any = completions[0] if len(completions) == 1 else Union[tuple(completions)]  # noqa: UP007
    for index, path in enumerate(CHAT_PATHS):
        app.add_api_route(path, chat_completions, methods=["POST"], response_model=response_model,
                          tags=["openai"], operation_id="openai_chat_completions" + ("_alias" if index else ""),
                          summary=f"Chat with {names}" + (" (alias of /v1/chat/completions)" if index else ""),
                          description=CHAT_DESCRIPTION,
                          responses={200: ok, **_responses("OpenAIChat", OPENAI_CHAT_ERRORS)})
    return chunk_schemas


def ab_arm(ab: ABSplit, body: ChatCompletionRequest) -> str:
    """The arm answering a request to the A/B model: sticky by OpenAI's ``user`` field, else the ``X-ICR2-User``
    header (``ab_split.USER_HEADER``), random without either; noted on the request's observation for its A/B
    record."""
    observation = current_observation()
    user = (body.model_extra or {}).get("user")  # an accepted extra field (openai_models.ACCEPTED_UNUSED_FIELDS)
    if not isinstance(user, str) or not user:
        user = observation.user if observation is not None else None
    arm = ab.arm_for(user)
    if observation is not None:
        observation.arm, observation.ab_model, observation.user = arm, ab.model, user
    return arm


def combined_chat_request_model(served: dict[str, ServedPipeline]) -> type[ChatCompletionRequest]:
    """The chat body when several pipelines are served: OpenAI's fields plus every pipeline's other declared
    inputs, each optional here (the chosen pipeline's request model requires its own).

    :raises ValueError: two pipelines declare an input of one name with different types.
    """
    extra: dict[str, Any] = {}
    owners: dict[str, str] = {}
    for name, pipeline in served.items():
        per_pipeline = build_chat_request_model(pipeline.spec, pipeline.request_model)
        for field_name, field in per_pipeline.model_fields.items():
            if field_name in ChatCompletionRequest.model_fields:
                continue
            if field_name in extra and extra[field_name][0] != (field.annotation | None):
                raise ValueError(f"pipelines {owners[field_name]} and {name} both declare the input {field_name!r} "
                                 "with different types; the one chat route cannot carry both: serve them apart.")
            extra[field_name] = (field.annotation | None, Field(None, description=field.description))
            owners[field_name] = name
    return create_model("ServedChatCompletionRequest", __base__=ChatCompletionRequest, **extra)


async def _chat(spec: PipelineSpec, wrapper: DeclaredPipelineWrapper, request_model: type[BaseModel],
                completion_model: type[BaseModel], body: ChatCompletionRequest, used: tuple[str, ...] = ()
                ) -> Response:
    """Answer one chat request; ``used``: accepted extra fields the server did use (the A/B split's ``user``),
    left out of ``x-icr2-ignored-fields``."""
    ignored = [field for field in check_request_fields(body) if field not in used]
    query_index, query = query_from_messages(body.messages)
    inputs = {name: getattr(body, name) for name in spec.inputs if name != "query"}
    try:
        validated = request_model(query=query, **inputs)
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(str(part) for part in first.get("loc", ()))
        param = f"messages[{query_index}].content" if location == "query" else location
        reasons = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in error.errors())
        raise ChatRequestRefused(422, "invalid_request", reasons.replace("query:", f"messages[{query_index}].content "
                                                                         "(the query):"), param=param) from error
    inputs = {name: getattr(validated, name) for name in spec.inputs}
    headers = {"x-icr2-query-message": str(query_index),
               "x-icr2-ignored-messages": str(len(body.messages) - 1),
               "x-icr2-ignored-fields": ",".join(ignored)}
    try:
        return await _answer(spec, wrapper, completion_model, body, inputs, headers)
    except HTTPException:
        raise
    except Exception as error:  # as on the run route: a failure the request did not cause
        logger.exception("pipeline failed")
        raise RequestRefused(500, "pipeline_failed", f"{type(error).__name__}: {error}") from error


async def _answer(spec: PipelineSpec, wrapper: DeclaredPipelineWrapper, completion_model: type[BaseModel],
                  body: ChatCompletionRequest, inputs: dict, headers: dict[str, str]) -> Response:
    budget = body.max_completion_tokens or body.max_tokens
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if not body.stream:
        answer = await run_in_threadpool(wrapper.answer, inputs, budget)
        payload = {"id": completion_id, "object": "chat.completion", "created": created, "model": spec.name,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                                "finish_reason": answer.finish_reason, "logprobs": None}],
                   "usage": answer.usage, **_outputs(answer)}
        # checked against the documented model: an answer that does not fit is a 500, never an undocumented 200
        return JSONResponse(completion_model.model_validate(payload).model_dump(mode="json"), headers=headers)
    events = await run_in_threadpool(wrapper.stream_answer, inputs, budget)
    first = await run_in_threadpool(next, events)  # a refusal (the prompt over the context) is an HTTP error still
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    chunks = _sse(first, events, completion_id, created, spec.name, include_usage)
    return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)


def _outputs(answer: ChatAnswer) -> dict[str, Any]:
    return {"icr2_outputs": answer.outputs} if answer.outputs else {}


def _sse(first: str | ChatAnswer, events: Iterator[str | ChatAnswer], completion_id: str, created: int,
         model: str, include_usage: bool) -> Generator[str, None, None]:
    def chunk(delta: dict | None = None, finish_reason: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                             "logprobs": None}]
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    event = first
    try:
        while True:
            if isinstance(event, ChatAnswer):
                yield chunk({}, event.finish_reason, **_outputs(event))
                if include_usage:
                    yield chunk(None, usage=event.usage)
                yield "data: [DONE]\n\n"
                return
            yield chunk({"content": event})
            event = next(events)
    except Exception as error:  # the headers are sent: the error is an event, which the openai client raises
        if isinstance(error, RequestRefused):
            status, kind, message = error.status_code, error.error, str(error.detail)
        else:
            logger.exception("pipeline failed while streaming")
            status, kind, message = 500, "pipeline_failed", f"{type(error).__name__}: {error}"
        yield f"data: {json.dumps(openai_error(status, kind, message)[1])}\n\n"


__all__ = ["CHAT_PATHS", "MODELS_PATHS", "OPENAI_PATHS", "add_openai_routes", "combined_chat_request_model",
           "is_openai_path"]
