"""The OpenAI-compatible bodies ``icr2 serve`` reads and answers, as Pydantic models, so that ``/openapi.json``
states them exactly (the routes are in ``openai_routes``).

* request (``POST /v1/chat/completions``): OpenAI's ``model``, ``messages``, ``stream``, ``stream_options``,
  ``max_completion_tokens`` (or the older ``max_tokens``) and ``n`` (1 only), plus one top-level field per
  declared input other than ``query``, typed as in ``POST /<name>/run`` (the oracle's ``documents``), all strictly
  typed (``max_tokens: true`` is not 1). An OpenAI field that would change the answer and that the pipeline
  cannot honour (``UNSUPPORTED_FIELDS``: ``tools``, ``response_format``, ``logprobs``, ``temperature``...: each
  reader decodes as its YAML says) is refused 400 ``unsupported_parameter`` naming it, unless it is null or the
  value that asks for nothing (``tools: []``, ``logprobs: false``); OpenAI's fields that do not change the answer
  (``ACCEPTED_UNUSED_FIELDS``: ``user``, ``metadata``...) are accepted and named in the answer's
  ``x-icr2-ignored-fields`` header; any other field is refused 400 ``unknown_parameter`` with the nearest known
  name, as OpenAI refuses an unrecognized argument (``check_request_fields``).
* the query is the text of the LAST user message (``query_from_messages``); a library pipeline declares no
  chat-history input, so every other message (system, earlier turns, a trailing assistant prefill) is not seen
  by the pipeline: the answer's ``x-icr2-ignored-messages`` header counts them and ``x-icr2-query-message``
  gives the index of the message used.
* 200: a ``chat.completion`` (one choice; ``usage`` from the reply's ``prompt_tokens``/``completion_tokens``
  meta, null when the reader reports none; ``icr2_outputs``: the pipeline's other declared outputs, e.g. the
  retrieved ``documents``), or with ``stream: true`` server-sent ``chat.completion.chunk`` events ending with
  ``data: [DONE]``.
* every error: OpenAI's ``{"error": {"message", "type", "param", "code"}}``, one model per status, whose
  ``code`` is the list of codes that status can carry (``OPENAI_CHAT_ERRORS``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, create_model

from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.serving.refusals import RequestRefused
from icr2_components.text.blank import is_blank

OWNED_BY = "icr2_components"
FINISH_REASONS = ("stop", "length")

BAD_HTTP = ("the Content-Length is not a number (checked here when the HTTP server passes such a request on; "
            "uvicorn's parser refuses it first, in the server-wide shape below)")
# status -> {OpenAI error code: when it is answered}
OPENAI_CHAT_ERRORS: dict[int, dict[str, str]] = {
    400: {"malformed_json": "the body is not valid JSON, or not UTF-8, or holds NaN, Infinity or a number beyond a "
                            "float",
          "bad_request": BAD_HTTP,
          "invalid_request": "a field is missing, of the wrong type or out of bounds (the query too: the last user "
                             "message's text), or there is no user message; `param` names the field",
          "unsupported_parameter": "an OpenAI field the pipeline cannot honour (`tools`, `response_format`, "
                                   "`logprobs`, `temperature`...), given a value that would change the answer; "
                                   "`param` names it",
          "unknown_parameter": "a field that is neither OpenAI's nor a declared input of the pipeline; `param` "
                               "names it and the message the nearest known name",
          "context_length_exceeded": "the prompt built from the request is longer than the reader's context (as "
                                     "OpenAI answers it); the message names the prompt's length and the limit",
          "missing_context": "a context-aware decoding reader got no passages to contrast with (only pipelines "
                             "with such a reader)"},
    404: {"model_not_found": "`model` is not the served pipeline's name (GET /v1/models lists it)"},
    408: {"request_timeout": "the whole body did not arrive within the server's --body-timeout (the connection is "
                             "closed)"},
    413: {"request_too_large": "the body is over the server's --max-body-bytes (declared or counted)"},
    429: {"server_busy": "--concurrency runs and --max-queue waiting requests are already admitted; retry after the "
                         "Retry-After header's seconds (the openai client does)"},
    500: {"pipeline_failed": "the pipeline failed for a reason the request did not cause",
          "server_error": "an unexpected error in the server"},
    504: {"run_timeout": "the request was not answered within the server's --request-timeout (the connection is "
                         "closed; a stream still going is ended there)"},
}
OPENAI_MODELS_ERRORS: dict[int, dict[str, str]] = {
    400: {"bad_request": BAD_HTTP},
    408: {"request_timeout": "a body declared with the GET did not arrive within --body-timeout"},
    413: {"request_too_large": "a body sent with the GET is over --max-body-bytes"},
}
# the icr2 error kind (RUN_ERRORS, refusals) -> (status, OpenAI code) on an OpenAI route
ICR2_TO_OPENAI: dict[str, tuple[int, str]] = {
    "context_too_long": (400, "context_length_exceeded"),
    "missing_context": (400, "missing_context"),
    "invalid_request": (400, "invalid_request"),
    "unsupported_parameter": (400, "unsupported_parameter"),
    "unknown_parameter": (400, "unknown_parameter"),
    "malformed_json": (400, "malformed_json"),
    "bad_request": (400, "bad_request"),
    "model_not_found": (404, "model_not_found"),
    "not_found": (404, "not_found"),
    "method_not_allowed": (405, "method_not_allowed"),
    "request_too_large": (413, "request_too_large"),
    "request_timeout": (408, "request_timeout"),
    "server_busy": (429, "server_busy"),
    "pipeline_failed": (500, "pipeline_failed"),
    "server_error": (500, "server_error"),
    "run_timeout": (504, "run_timeout"),
}


def openai_error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def openai_error(status: int, kind: str, message: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` of an error on an OpenAI route, from the icr2 error kind and status it would have on
    ``POST /<name>/run`` (a prompt over the context is 400 ``context_length_exceeded`` here, as OpenAI answers)."""
    status, code = ICR2_TO_OPENAI.get(kind, (status, kind))
    return status, {"error": {"message": message, "type": openai_error_type(status), "param": param, "code": code}}


_NO_TOOLS = "the pipeline's readers call no tools"
_YAML_DECODING = ("each reader decodes as the pipeline's YAML says (greedy unless it samples); decoding settings "
                  "are not taken per request")
_TEXT_ONLY = "the answer is text only"
UNSUPPORTED_FIELDS: dict[str, tuple[tuple[Any, ...], str]] = {
    "tools": (([],), _NO_TOOLS),
    "tool_choice": (("none",), _NO_TOOLS),
    "parallel_tool_calls": ((), _NO_TOOLS),
    "functions": (([],), _NO_TOOLS),
    "function_call": (("none",), _NO_TOOLS),
    "response_format": (({"type": "text"},), "the readers answer in free text; a JSON format or schema is not "
                                             "enforced"),
    "logprobs": ((False,), "the answer carries no log-probabilities"),
    "top_logprobs": ((), "the answer carries no log-probabilities"),
    "temperature": ((), _YAML_DECODING),
    "top_p": ((), _YAML_DECODING),
    "seed": ((), _YAML_DECODING),
    "stop": (([],), _YAML_DECODING),
    "frequency_penalty": ((0,), _YAML_DECODING),
    "presence_penalty": ((0,), _YAML_DECODING),
    "logit_bias": (({},), _YAML_DECODING),
    "reasoning_effort": ((), _YAML_DECODING),
    "verbosity": ((), _YAML_DECODING),
    "prediction": ((), _YAML_DECODING),
    "audio": ((), _TEXT_ONLY),
    "modalities": ((["text"],), _TEXT_ONLY),
    "web_search_options": ((), "the pipeline reads its own passages, not the web"),
}
"""OpenAI chat request fields that would change the answer and that the pipeline cannot honour: field -> (the
values besides null that ask for nothing, why it cannot). Any other value is refused 400 ``unsupported_parameter``."""
ACCEPTED_UNUSED_FIELDS = ("user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key")
"""OpenAI chat request fields that do not change the answer: accepted, not used, named in ``x-icr2-ignored-fields``."""


class ChatRequestRefused(RequestRefused):
    """A chat request the server refuses: the icr2 error kind, and the request field at fault (OpenAI's param)."""

    def __init__(self, status_code: int, error: str, reason: str, param: str | None = None) -> None:
        super().__init__(status_code, error, reason)
        self.param = param


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    """One part of a message's content; only `text` parts can be a query."""

    type: str = Field(..., description="`text` (read); other kinds, e.g. `image_url`, are refused in the query")
    text: str | None = None


class ChatMessageIn(_Open):
    """One message of the conversation, as OpenAI's Chat Completions API takes it."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = Field(
        None, description="text, or a list of content parts; of the last user message, the text is the query")
    name: str | None = None


class StreamOptions(_Open):
    include_usage: StrictBool = Field(False, description="send one more chunk, with `usage` and no choices, "
                                                   "before `data: [DONE]`")


class ChatCompletionRequest(_Open):
    """OpenAI's chat completion request. Fields not listed here are checked by ``check_request_fields``: OpenAI's
    that would change the answer are refused unless they ask for nothing, those that would not are accepted and
    reported as ignored, and any other is refused."""

    model: str = Field(..., description="the served pipeline's name (GET /v1/models)")
    messages: list[ChatMessageIn] = Field(
        ..., min_length=1,
        description="the conversation; the text of the LAST user message is the pipeline's `query`. The "
                    "pipeline declares no chat-history input, so the other messages are not used (the "
                    "`x-icr2-ignored-messages` header counts them)")
    stream: StrictBool = Field(False, description="answer with server-sent `chat.completion.chunk` events, then "
                                            "`data: [DONE]`; the reader's tokens as they are generated when it "
                                            "streams (LocalChatReader does), else the whole answer in one chunk")
    stream_options: StreamOptions | None = None
    max_completion_tokens: StrictInt | None = Field(
        None, ge=1, description="at most this many answer tokens: lowers each reader's budget (the server's "
                                "--max-new-tokens, else the YAML's), never raises it")
    max_tokens: StrictInt | None = Field(None, ge=1, description="the older name of `max_completion_tokens`")
    n: StrictInt | None = Field(None, ge=1, le=1, description="one choice only")


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(..., description="the pipeline's name: the `model` of a chat completion request")
    object: Literal["model"]
    created: int = Field(..., description="when the server loaded the pipeline (Unix seconds)")
    owned_by: str


class ModelList(BaseModel):
    """The served pipeline, as the one model of an OpenAI-compatible server."""

    model_config = ConfigDict(extra="forbid")
    object: Literal["list"]
    data: list[ModelCard]


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int = Field(..., description="the prompt of the reader that wrote the answer (not a gate's)")
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["assistant"]
    content: str


class Choice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: Literal[0]
    message: AssistantMessage
    finish_reason: Literal[FINISH_REASONS] = Field(  # type: ignore[valid-type]
        ..., description="`length`: the answer budget ended the reply; `stop`: the model did")
    logprobs: None = None


class Delta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["assistant"] | None = Field(None, description="on the first chunk only")
    content: str | None = Field(None, description="the next piece of the answer (none on the last chunk)")


class ChunkChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: Literal[0]
    delta: Delta
    finish_reason: Literal[FINISH_REASONS] | None = Field(  # type: ignore[valid-type]
        ..., description="set on the last chunk of the answer only")
    logprobs: None = None


def _model_name(spec: PipelineSpec, suffix: str) -> str:
    return "".join(part.capitalize() for part in spec.name.split("_")) + suffix


def build_chat_request_model(spec: PipelineSpec, request_model: type[BaseModel]) -> type[ChatCompletionRequest]:
    """``ChatCompletionRequest`` plus the pipeline's declared inputs other than ``query``, each typed and
    required as in ``request_model`` (``POST /<name>/run``'s body)."""
    extra: dict[str, Any] = {}
    for name, field in request_model.model_fields.items():
        if name == "query":
            continue
        if name in ChatCompletionRequest.model_fields:
            raise ValueError(f"{spec.path}: input {name!r} has the name of an OpenAI chat request field, so the "
                             "OpenAI route cannot carry it; rename the input.")
        extra[name] = (field.annotation, field)
    return create_model(_model_name(spec, "ChatCompletionRequest"), __base__=ChatCompletionRequest, **extra)


def build_chat_response_models(spec: PipelineSpec, result_model: type[BaseModel]) -> tuple[type[BaseModel], ...]:
    """``(completion, chunk)``: the ``chat.completion`` body and one streamed ``chat.completion.chunk``, with
    ``icr2_outputs`` typed from the pipeline's declared outputs other than ``replies`` (when it has any)."""
    others = {name: (field.annotation, field) for name, field in result_model.model_fields.items()
              if name != "replies"}
    outputs: dict[str, Any] = {}
    if others:
        outputs_model = create_model(_model_name(spec, "Icr2Outputs"), __config__=ConfigDict(extra="forbid"),
                                     **others)
        outputs = {"icr2_outputs": (outputs_model, Field(..., description="the pipeline's other declared outputs"))}
    completion = create_model(
        _model_name(spec, "ChatCompletion"), __config__=ConfigDict(extra="forbid"),
        id=(str, ...), object=(Literal["chat.completion"], ...), created=(int, ...),
        model=(str, Field(..., description="the pipeline's name")),
        choices=(list[Choice], Field(..., min_length=1, max_length=1)),
        usage=(Usage | None, Field(..., description="null when the reader reports no token counts")),
        **outputs,
    )
    chunk_outputs = {name: (value[0] | None, Field(None, description="on the last chunk of the answer"))
                     for name, value in outputs.items()}
    chunk = create_model(
        _model_name(spec, "ChatCompletionChunk"), __config__=ConfigDict(extra="forbid"),
        id=(str, Field(..., description="the same on every chunk of one answer")),
        object=(Literal["chat.completion.chunk"], ...), created=(int, ...), model=(str, ...),
        choices=(list[ChunkChoice], Field(..., max_length=1,
                                          description="one choice; none on the usage chunk")),
        usage=(Usage | None, Field(None, description="only on the chunk `stream_options.include_usage` asks for")),
        **chunk_outputs,
    )
    return completion, chunk


def openai_error_model(name: str, status: int, codes: dict[str, str]) -> type[BaseModel]:
    """The OpenAI error body of one status: ``error.code`` is one of ``codes`` (code -> when it is answered)."""
    meaning = "; ".join(f"{code}: {when}" for code, when in codes.items())
    detail = create_model(
        f"{name}Detail", __config__=ConfigDict(extra="forbid"),
        message=(str, Field(..., description="what was wrong and, where it applies, the limit or how to fix it")),
        type=(Literal[openai_error_type(status)], ...),
        param=(str | None, Field(..., description="the request field at fault, when there is one")),
        code=(Literal[tuple(codes)], Field(..., description=meaning)),
    )
    return create_model(name, __config__=ConfigDict(extra="forbid"), error=(detail, ...))


def _asks_for_nothing(value: Any, neutral: tuple[Any, ...]) -> bool:
    """Null, or one of ``neutral`` of the same kind (``false`` is not the number 0)."""
    return value is None or any(value == known and isinstance(value, bool) == isinstance(known, bool)
                                for known in neutral)


def refuse_unhonoured_fields(fields: dict[str, Any]) -> None:
    """Refuse the OpenAI fields among ``fields`` that the pipeline cannot honour and that ask for something
    (``UNSUPPORTED_FIELDS``); null and the values that ask for nothing pass.

    :raises ChatRequestRefused: 400 ``unsupported_parameter`` naming each such field (``param``: the first).
    """
    unsupported = [name for name in fields if name in UNSUPPORTED_FIELDS
                   and not _asks_for_nothing(fields[name], UNSUPPORTED_FIELDS[name][0])]
    if unsupported:
        by_reason: dict[str, list[str]] = {}
        for name in unsupported:
            value = json.dumps(fields[name], default=str)
            shown = value if len(value) <= 60 else value[:57] + "..."
            by_reason.setdefault(UNSUPPORTED_FIELDS[name][1], []).append(f"{name}: {shown}")
        reasons = "; ".join(f"{', '.join(given)}: {why}" for why, given in by_reason.items())
        raise ChatRequestRefused(400, "unsupported_parameter",
                                 f"Unsupported parameter{'s' if len(unsupported) > 1 else ''} "
                                 f"{', '.join(repr(name) for name in unsupported)} ({reasons}). Remove "
                                 f"{'them' if len(unsupported) > 1 else 'it'} (null asks for nothing too).",
                                 param=unsupported[0])


def answer_budget(body: dict[str, Any]) -> int | None:
    """``max_completion_tokens`` (else ``max_tokens``) of a chat request body given as a mapping (hayhooks' hook),
    checked as the chat route's model checks it: a whole number of at least 1, never a boolean.

    :raises ChatRequestRefused: 422 ``invalid_request`` (400 on an OpenAI route) naming the field.
    """
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ChatRequestRefused(422, "invalid_request", f"{name} must be a whole number of tokens, at least 1, "
                                     f"got {json.dumps(value, default=str)}", param=name)
    return body.get("max_completion_tokens") or body.get("max_tokens")


def check_request_fields(body: ChatCompletionRequest) -> list[str]:
    """The request's fields beyond the declared ones that are accepted and not used (for
    ``x-icr2-ignored-fields``), after refusing those that would change the answer.

    :returns: the accepted, unused field names, sorted (``stream_options`` without ``stream`` among them).
    :raises ChatRequestRefused: 400 ``unsupported_parameter`` naming each OpenAI field the pipeline cannot honour
        that asks for something, else 400 ``unknown_parameter`` naming each field OpenAI does not have either (with
        the nearest known name).
    """
    from icr2_components.strict_mapping import nearest_names

    extra = dict(body.model_extra or {})
    refuse_unhonoured_fields(extra)
    unknown = [name for name in extra if name not in UNSUPPORTED_FIELDS and name not in ACCEPTED_UNUSED_FIELDS]
    if unknown:
        known = [*type(body).model_fields, *UNSUPPORTED_FIELDS, *ACCEPTED_UNUSED_FIELDS]
        nearest = nearest_names(unknown, known)
        guess = "".join(f" Did you mean {nearest[name]!r} for {name!r}?" for name in unknown if name in nearest)
        inputs = sorted(set(type(body).model_fields) - set(ChatCompletionRequest.model_fields))
        raise ChatRequestRefused(400, "unknown_parameter",
                                 f"Unrecognized request argument{'s' if len(unknown) > 1 else ''} supplied: "
                                 f"{', '.join(repr(name) for name in unknown)}.{guess} This server takes OpenAI's "
                                 "chat completion fields and the pipeline's declared inputs besides the query "
                                 f"({', '.join(inputs) or 'none'}).", param=unknown[0])
    ignored = set(extra)
    if body.stream_options is not None and not body.stream:
        ignored.add("stream_options")
    return sorted(ignored)


def message_text(content: Any) -> str | None:
    """The text of a message's content (a string, or its `text` parts joined by newlines); None when a part is
    not text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        part_type = part.type if isinstance(part, ContentPart) else (part or {}).get("type")
        text = part.text if isinstance(part, ContentPart) else (part or {}).get("text")
        if part_type != "text" or not isinstance(text, str):
            return None
        texts.append(text)
    return "\n".join(texts)


def query_from_messages(messages: list[ChatMessageIn | dict]) -> tuple[int, str]:
    """``(index, text)`` of the last user message (hayhooks' ``get_last_user_message`` rule), refused with a
    ``ChatRequestRefused`` naming the message when there is none or it is not text."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        role = message.role if isinstance(message, ChatMessageIn) else (message or {}).get("role")
        if role != "user":
            continue
        content = message.content if isinstance(message, ChatMessageIn) else message.get("content")
        text = message_text(content)
        if text is None:
            raise ChatRequestRefused(422, "invalid_request", f"messages[{index}] (the last user message, whose text "
                                     "is the query) has a content part that is not text; send its question as text",
                                     param=f"messages[{index}].content")
        if is_blank(text):
            raise ChatRequestRefused(422, "invalid_request", f"messages[{index}] (the last user message, whose text "
                                     "is the query) shows no text: it is empty, white space or invisible characters "
                                     "only (a zero-width space...)", param=f"messages[{index}].content")
        return index, text
    raise ChatRequestRefused(422, "invalid_request", "messages has no user message; the last user message is the "
                             "pipeline's query", param="messages")


__all__ = ["ACCEPTED_UNUSED_FIELDS", "OPENAI_CHAT_ERRORS", "OPENAI_MODELS_ERRORS", "UNSUPPORTED_FIELDS",
           "ChatCompletionRequest", "ChatRequestRefused", "ModelList", "answer_budget", "build_chat_request_model",
           "build_chat_response_models", "check_request_fields", "openai_error", "openai_error_model",
           "query_from_messages", "refuse_unhonoured_fields"]
