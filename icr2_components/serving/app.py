"""``icr2 serve``: library pipelines behind a FastAPI app, loopback by default, JSON errors.

Each pipeline is loaded by ``PipelineSpec`` (our allowlisted loader, a shipped name or a path) and wrapped in
``DeclaredPipelineWrapper`` (a hayhooks ``BasePipelineWrapper``, so hayhooks itself can deploy it too); several
pipelines in one app (``pipelines``) each have their own run route and model, and share the models and indexes
they have in common (the process-wide caches). The app is plain FastAPI with exactly the routes below, built from
public APIs only. The middleware, from the outside in: ``security.SecurityGuard`` (header limits, the request id,
CORS, API keys and per-key rate limits: ``auth``), then ``RequestGuard`` below, then the routes; other middleware
(metrics, tracing) belongs between the two, where requests are authenticated and carry their id
(``scope["state"]["request_id"]``, ``scope["state"]["api_key_name"]``). ``lifecycle`` adds ``GET /health/live``
and ``GET /health/ready`` and drains on SIGTERM (``run_server``). Around ``POST /<name>/run``:

* requests are validated by a model built from the declared ``inputs`` (unknown fields refused, ``query`` a
  non-empty string of at most ``max_query_chars``): malformed JSON -> 400, missing/wrong fields -> 422;
* a body over ``max_body_bytes`` -> 413 (checked on Content-Length, answered at once before reading any of it,
  and on the bytes actually read); what the client still sends after a 413 is read and discarded only until
  the body deadline, then the connection is closed; a body that has not wholly arrived ``body_timeout`` seconds
  after its headers (a client that declares one and never sends it, or trickles it a byte at a time) -> 408
  ``request_timeout``, and the connection is closed;
* a JSON body holding ``NaN``, ``Infinity`` or a number beyond a float (``1e999``), which Python's JSON reader
  would take and JSON does not allow -> 400 ``malformed_json``; the request models are strict besides (no
  boolean for a number: ``request_model``, ``openai_models``);
* a request not answered ``request_timeout`` seconds after its headers (waiting for a run included) -> 504
  ``run_timeout`` (the run's slot is held until its work really ends, so the concurrency stays true), and the
  connection is closed; a streamed answer still going then is ended there (without its ``data: [DONE]``);
* the work is bounded: at most ``concurrency`` pipeline runs at once and ``max_queue`` more requests waiting for
  one (a separate setting: the concurrency may come from the served backend); a run or chat request beyond that
  -> 429 ``server_busy`` with ``Retry-After`` (seconds: about how long an admitted request takes now), so memory
  and waiting stay bounded however many clients come (``bench/serve_load.py``);
* a request the HTTP parser refuses (``Content-Length: abc``) -> 400 ``bad_request``, as JSON too: uvicorn
  answers those before any ASGI code runs, so ``run_server`` gives it a protocol class whose 400 is our JSON
  (``json_error_http_protocol``); the connection is closed after it;
* a request the model cannot take (its prompt is over the reader's context) -> 413 ``context_too_long``, naming
  the limit (``refusals``); a context-aware decoding reader given no context -> 422 ``missing_context``; any other
  pipeline failure -> 500; every error as ``{"error": ..., "reason": ..., "status": ...}``;
* the pipeline is also an OpenAI-compatible chat model (``openai_routes``): ``GET /v1/models`` and
  ``POST /v1/chat/completions`` (and hayhooks' aliases ``/models``, ``/chat/completions``), where the last user
  message is the query, ``stream: true`` streams the reader's tokens as server-sent events, and every error is
  OpenAI's ``{"error": {"message", "type", "param", "code"}}`` (a prompt over the context: 400
  ``context_length_exceeded``), so that the official ``openai`` client works against
  ``OpenAI(base_url="http://127.0.0.1:1416/v1", api_key="unused")``;
* only the run routes, the OpenAI routes, ``GET /status``, the health routes and ``GET /openapi.json`` are served
  (``PUBLIC_PATHS``); any other path is a JSON 404 and a method a path does not list a JSON 405 (OpenAI-shaped
  under ``/v1/``). There are no deploy/undeploy, draw, Responses or Files routes, so nobody can deploy another
  (non-allowlisted) pipeline into a running server. There is no ``/docs`` or
  ``/redoc`` page: FastAPI's pages load Swagger UI / ReDoc from a CDN (blank offline) and no dependency of ours
  ships the assets; load ``/openapi.json`` into a local OpenAPI viewer instead;
* ``/openapi.json`` describes exactly that: those paths, the request models, the 200 bodies (``result``
  with one key per declared output, typed from its socket: ``response_model``; the ``chat.completion`` and the
  streamed chunk: ``openai_models``) and every error status each operation can answer, with its error kinds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import math
import socket
import sys
import time
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from icr2_components.backends import Backend
from icr2_components.backends.pipelines import request_concurrency
from icr2_components.concurrency import check_concurrency
from icr2_components.errors import UserInputError
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.serving.auth import KeyStore
from icr2_components.serving.lifecycle import (
    DEFAULT_GRACE_SECONDS,
    HEALTH_PATHS,
    Lifecycle,
    add_health_routes,
    graceful_server_class,
)
from icr2_components.serving.observability import Observability, add_observability, add_observing_middleware
from icr2_components.serving.openai_models import openai_error
from icr2_components.serving.openai_routes import CHAT_PATHS, OPENAI_PATHS, add_openai_routes, is_openai_path
from icr2_components.serving.pipeline_wrapper import DeclaredPipelineWrapper
from icr2_components.serving.pipelines import ServedPipeline, load_served_pipelines
from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS
from icr2_components.serving.response_model import error_model
from icr2_components.serving.security import SECURITY_ERRORS, SecurityGuard

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1416
DEFAULT_MAX_BODY_BYTES = 64 * 1024
# requests waiting for a pipeline run beyond those running; more get 429 (a CPU reader answers in seconds, so 8
# waiting is tens of seconds of work already promised)
DEFAULT_MAX_QUEUE = 8
# seconds a client has to send the whole body it declared, and the server to answer the whole request (both from
# the end of the headers)
DEFAULT_BODY_TIMEOUT = 10.0
DEFAULT_REQUEST_TIMEOUT = 300.0
MAX_TIMEOUT_S = 86400.0
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
OPENAPI_PATH = "/openapi.json"
PUBLIC_PATHS = {"/status", OPENAPI_PATH} | OPENAI_PATHS | HEALTH_PATHS  # besides the run routes; others are 404

# status -> {error kind: when it is answered}: the catalogue behind the documented error models.
BAD_HTTP = ("the HTTP parser refused the request, e.g. a Content-Length that is not a number (the connection is "
            "closed after the answer), or the body could not be read")
RUN_ERRORS: dict[int, dict[str, str]] = {
    400: {"malformed_json": "the body is not valid JSON, or not UTF-8, or holds NaN, Infinity or a number beyond a "
                            "float", "bad_request": BAD_HTTP},
    408: {"request_timeout": "the whole body did not arrive within the server's --body-timeout (the connection is "
                             "closed)"},
    413: {"request_too_large": "the body is over the server's --max-body-bytes (declared or counted)",
          "context_too_long": "the prompt built from the request is longer than the reader's context; the reason "
                              "names the prompt's length and the limit"},
    422: {"invalid_request": "a field is missing, unknown, of the wrong type or out of bounds; the reason names it",
          "missing_context": "a context-aware decoding reader got no passages to contrast with (only pipelines "
                             "with such a reader)"},
    429: {"server_busy": "--concurrency runs and --max-queue waiting requests are already admitted; retry after "
                         "the Retry-After header's seconds"},
    500: {"pipeline_failed": "the pipeline failed for a reason the request did not cause",
          "server_error": "an unexpected error in the server"},
    504: {"run_timeout": "the request was not answered within the server's --request-timeout (the connection is "
                         "closed)"},
}
STATUS_ERRORS: dict[int, dict[str, str]] = {
    400: {"bad_request": BAD_HTTP},
    408: {"request_timeout": "a body declared with the GET did not wholly arrive within --body-timeout"},
    413: {"request_too_large": "a body sent with the GET is over --max-body-bytes"},
}
_STATUS_ERROR_KIND = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}

logger = logging.getLogger(__name__)


def error_body(status: int, error: str, reason: str) -> dict[str, Any]:
    return {"error": error, "reason": reason, "status": status}


def error_for_path(path: str, status: int, error: str, reason: str, param: str | None = None) -> tuple[int, dict]:
    """``(status, body)`` of an error: OpenAI's shape on the OpenAI routes (and under /v1/), else ours."""
    if is_openai_path(path):
        return openai_error(status, error, reason, param)
    return status, error_body(status, error, reason)


def error_response(request: Request, status: int, error: str, reason: str, param: str | None = None) -> JSONResponse:
    status, body = error_for_path(request.url.path, status, error, reason, param)
    return JSONResponse(body, status_code=status)


class RequestGuard:
    """ASGI middleware: path allowlist (404), a request-size limit (413), a body deadline (408) and admission of
    pipeline work (429 beyond ``capacity`` requests in the pipeline), all answered as JSON (OpenAI's error shape on
    the OpenAI paths).

    :param work_paths: the paths that run the pipeline (admitted, counted and refused when full).
    :param capacity: requests admitted to ``work_paths`` at once: the runs (``concurrency``) and those waiting for
        one (``max_queue``).
    :param body_timeout: seconds from the end of the headers to the end of a declared body (the whole body,
        however it is paced), then 408.
    :param request_timeout: seconds from the end of the headers to the end of the answer, then 504 (or, once an
        answer has started, the connection is closed).
    """

    def __init__(self, app, allowed_paths: set[str], max_body_bytes: int, work_paths: frozenset[str] = frozenset(),
                 capacity: int | None = None, body_timeout: float = DEFAULT_BODY_TIMEOUT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        self.app = app
        self.allowed_paths = allowed_paths
        self.max_body_bytes = max_body_bytes
        self.work_paths = work_paths
        self.capacity = capacity
        self.body_timeout = body_timeout
        self.request_timeout = request_timeout
        self.admitted = 0  # requests in the pipeline now (running or waiting); the event loop is one thread
        self.refused_busy = 0
        self._seconds = 1.0  # moving average of an admitted request's time, for Retry-After

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        arrived = time.monotonic()
        if path not in self.allowed_paths:
            await _send_json(send, *error_for_path(path, 404, "not_found",
                                                   f"{path} is not served; try {sorted(self.allowed_paths)}"))
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        _, too_big = error_for_path(path, 413, "request_too_large",
                                    f"the request body is over the limit of {self.max_body_bytes} bytes "
                                    "(icr2 serve --max-body-bytes raises it)")
        body_deadline = arrived + min(self.body_timeout, self.request_timeout)  # the whole body, not each piece
        if declared is not None:
            try:
                declared_bytes = int(declared)
            except ValueError:
                await _send_json(send, *error_for_path(path, 400, "bad_request", "Content-Length is not an integer"))
                return
            if declared_bytes > self.max_body_bytes:  # refused on what it declares, before a byte is read
                await _refuse_then_drain(receive, send, 413, too_big, body_deadline)
                return
        # Read the body here (at most the limit + 1 byte), then replay it: a chunked body is bounded too.
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, body_deadline - time.monotonic()))
            except TimeoutError:
                _, late = error_for_path(path, 408, "request_timeout",
                                         f"the request body did not arrive within {self.body_timeout:g} s "
                                         "(icr2 serve --body-timeout); the connection is closed")
                await _send_json(send, 408, late, close=True)
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _refuse_then_drain(receive, send, 413, too_big, body_deadline,
                                         more=message.get("more_body", False))
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if path in self.work_paths and _read_as_json(headers) and (problem := non_finite_json_number(body)):
            await _send_json(send, *error_for_path(path, 400, "malformed_json", f"the body is not valid JSON: "
                                                   f"{problem}"))
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        deadline = arrived + self.request_timeout
        if path not in self.work_paths or self.capacity is None:
            await self._answer_by(deadline, path, scope, replay, send)
            return
        if self.admitted >= self.capacity:
            self.refused_busy += 1
            retry_after = max(1, min(600, math.ceil(self._seconds)))
            _, busy = error_for_path(path, 429, "server_busy",
                                     f"the server is at capacity ({self.capacity} requests running or waiting: "
                                     f"icr2 serve --concurrency and --max-queue); retry in {retry_after} s")
            await _send_json(send, 429, busy, headers=[(b"retry-after", str(retry_after).encode())])
            return
        self.admitted += 1
        started = time.monotonic()
        try:
            await self._answer_by(deadline, path, scope, replay, send)
        finally:
            self.admitted -= 1
            self._seconds = 0.8 * self._seconds + 0.2 * (time.monotonic() - started)


    async def _answer_by(self, deadline: float, path: str, scope, receive, send) -> None:
        """Run the app for this request; past ``deadline`` answer 504 (or close a started answer), and return only
        when the app's work has ended, so an admitted request holds its place while its run goes on."""
        started, late = False, False

        async def guarded_send(message) -> None:
            nonlocal started
            if late:
                return  # the client was answered (or cut off) at the deadline; the late answer is dropped
            started = started or message["type"] == "http.response.start"
            await send(message)

        work = asyncio.ensure_future(self.app(scope, receive, guarded_send))
        try:
            await asyncio.wait_for(asyncio.shield(work), max(0.0, deadline - time.monotonic()))
            return
        except TimeoutError:
            late = True
        if not started:
            _, body = error_for_path(path, 504, "run_timeout",
                                     f"the request was not answered within {self.request_timeout:g} s "
                                     "(icr2 serve --request-timeout); the connection is closed")
            await _send_json(send, 504, body, close=True)
        else:  # an answer under way (a stream) cannot become an error: end the connection instead
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        try:
            await work
        except Exception:  # its failure, after the deadline, has no client to go to
            logger.warning("a request answered at its deadline failed later", exc_info=True)


async def _refuse_then_drain(receive, send, status: int, body: dict, deadline: float, more: bool = True) -> None:
    """Answer ``status`` at once (the whole JSON body, ``connection: close``), then read and discard what the client
    still sends until its body ends or ``deadline`` passes, then close the connection.

    The client has its answer before it sends another byte; the connection stays open only to take the rest of
    its body (closing on unread bytes would reset the connection, and a client still sending could lose the
    answer with it), and no longer than any body may take: a client that declares a large body and sends one
    byte is closed at the body deadline.
    """
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload, "more_body": True})  # the whole answer, sent now
    while more:
        try:
            message = await asyncio.wait_for(receive(), deadline - time.monotonic())
        except TimeoutError:
            break
        if message["type"] == "http.disconnect":
            break
        more = message.get("more_body", False)
    await send({"type": "http.response.body", "body": b"", "more_body": False})  # uvicorn closes the connection


def _read_as_json(headers: dict[bytes, bytes]) -> bool:
    """Whether FastAPI reads this request's body as JSON: no Content-Type, ``application/json`` or ``+json``."""
    media_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return not media_type or media_type == b"application/json" or (
        media_type.startswith(b"application/") and media_type.endswith(b"+json"))


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _NotFinite(f"{name} is not a JSON number (RFC 8259)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"{text} is beyond a 64-bit float (it would be read as infinity)")
    return value


def non_finite_json_number(body: bytes) -> str | None:
    """What makes a JSON body hold a number that is not finite (``NaN``, ``Infinity``, ``-Infinity``, ``1e999``),
    which Python's JSON reader (FastAPI's) takes, or nest deeper than that reader can follow; None when there is
    none, or the body is not JSON at all (the route's own parsing answers that).

    :returns: one line naming the value, or None.
    """
    try:
        json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite as error:
        return f"{error}; send finite numbers"
    except RecursionError:
        # FastAPI's reader would fail the same way and answer "There was an error parsing the body", naming nothing
        return "its arrays or objects nest deeper than the JSON reader takes (about 1,000 levels); nest less"
    except ValueError:  # not JSON (or not UTF-8): the route answers malformed_json itself
        return None
    return None


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = (),
                     close: bool = False) -> None:
    payload = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    if close:  # uvicorn closes the connection after a response that says so (an unread body cannot be skipped)
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


def _validation_reason(errors: list[dict], content_type: str | None = None) -> tuple[int, str, str]:
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid")
        return (
            400,
            "malformed_json",
            f"the body is not valid JSON: {(detail.get('ctx') or {}).get('error', detail.get('msg'))}",
        )
    parts = []
    for e in errors:
        location = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{location}: {e.get('msg')}")
    media_type = (content_type or "").split(";")[0].strip().lower()
    if not (media_type == "application/json" or media_type.endswith("+json")) and any(
            tuple(e.get("loc", ())) == ("body",) for e in errors):
        # FastAPI reads the body as JSON only when the request says so; else it validates the raw bytes
        parts.append(f"the body is read as JSON only with Content-Type: application/json "
                     f"(this request sent {content_type or 'none'})")
    return 422, "invalid_request", "; ".join(parts)


class StatusResponse(BaseModel):
    """``GET /status``: the server is up, and the pipelines it serves."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["Up!"] = Field(..., description="'Up!' while the server answers")
    pipelines: list[str] = Field(..., description="the served pipelines' names")


def run_endpoint(spec: PipelineSpec, wrapper: DeclaredPipelineWrapper, request_model: type[BaseModel],
                 response_model: type[BaseModel]):
    """The ``POST /<name>/run`` handler: the validated request's fields to ``wrapper.run_api`` (in a worker thread,
    so the event loop keeps answering), its declared outputs back as ``{"result": ...}``. A refusal the request
    caused keeps its status; any other failure is a 500 ``pipeline_failed`` naming the error."""

    async def run(body: request_model) -> response_model:  # type: ignore[valid-type]
        try:
            result = await run_in_threadpool(wrapper.run_api, **body.model_dump())
        except StarletteHTTPException:
            raise
        except Exception as error:  # whatever the pipeline raised, the answer is a JSON 500
            logger.exception("pipeline %s failed", spec.name)
            raise StarletteHTTPException(500, f"Pipeline execution failed: {error}") from error
        return response_model(result=result)

    run.__annotations__ = {"body": request_model, "return": response_model}
    return run


def create_serving_app(
    pipeline_path: str | list[str] | tuple[str, ...],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    max_new_tokens: int | None = None,
    concurrency: int | None = None,
    backend: Backend | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    api_keys: KeyStore | None = None,
    cors_origins: tuple[str, ...] | frozenset[str] = (),
    load_in_background: bool = False,
    observability: Observability | None = None,
) -> FastAPI:
    """Build the app serving ``pipeline_path`` (a shipped pipeline's name or a YAML path; or a list of them, or a
    folder: several pipelines, ``serving.pipelines``) at ``POST /<name>/run`` each, and each as a model of the
    OpenAI-compatible API; models and indexes the pipelines share are loaded once (the process-wide caches).
    ``concurrency``: pipeline runs at once, per pipeline (None: the backend's ``max_concurrency``, its kind's
    default without one, 1 without a served backend), so a batching LLM server behind the pipeline gets that many
    requests.

    ``concurrency`` pipeline runs at once, ``max_queue`` more requests waiting (then 429 with Retry-After);
    ``body_timeout`` seconds for a declared body to arrive whole (then 408), ``request_timeout`` seconds for the
    whole request to be answered (then 504), both from the end of its headers.

    ``api_keys``: the keys every route but ``/health/live`` needs (``serving.auth``; None: none needed);
    ``cors_origins``: the browser origins allowed (``serving.security``). ``load_in_background``: load the models
    once the server has started (``/health/ready`` says when; ``icr2 serve`` does this) rather than now.
    ``observability``: metrics at ``/metrics``, traces, JSON request logs and an online A/B split
    (``serving.observability``; None: none of them).

    Usage example:
    ```python
    from icr2_components.serving import create_serving_app, run_server

    app = create_serving_app("pipelines/closed_book.yaml", max_new_tokens=16)
    run_server(app, host="127.0.0.1", port=1416)   # POST /closed_book/run {"query": "..."}
    # and as an OpenAI model: OpenAI(base_url="http://127.0.0.1:1416/v1", api_key="unused").chat.completions
    #     .create(model="closed_book", messages=[{"role": "user", "content": "..."}])
    ```
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}.")
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 0:
        raise ValueError(f"max_queue (requests waiting for a run) must be an integer >= 0, got {max_queue!r}.")
    for name, value in (("body_timeout", body_timeout), ("request_timeout", request_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
            raise ValueError(f"{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, got "
                             f"{value!r}.")
    if body_timeout > request_timeout:
        raise ValueError(f"body_timeout ({body_timeout:g} s) must not exceed request_timeout ({request_timeout:g} s): "
                         "the body is part of the request.")
    # a given value is kept as before (serve has always let in-process readers share slots); the default follows
    # the backend
    concurrency = (
        check_concurrency(concurrency, "concurrency") if concurrency is not None else request_concurrency(backend)
    )
    served = load_served_pipelines(pipeline_path, backend=backend, max_new_tokens=max_new_tokens,
                                   concurrency=concurrency, max_query_chars=max_query_chars)
    lifecycle = Lifecycle(list(served))
    wrappers = {name: pipeline.wrapper for name, pipeline in served.items()}
    if not load_in_background:
        lifecycle.warm_up(wrappers)
        if lifecycle.failure is not None:
            raise lifecycle.failure

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        if load_in_background:
            lifecycle.warm_up_in_background(wrappers)
        yield
        lifecycle.mark_draining()
        if observability is not None and observability.tracer_provider is not None:
            observability.tracer_provider.force_flush()  # the last spans reach the collector before the exit

    names = ", ".join(served)
    app = FastAPI(title=f"icr2 serve: {names}", docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH,
                  lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        errors = list(error.errors())
        status, kind, reason = _validation_reason(errors, request.headers.get("content-type"))
        param = None
        if kind == "invalid_request" and errors:
            param = ".".join(str(p) for p in errors[0].get("loc", ()) if p != "body") or None
        return error_response(request, status, kind, reason, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
            # FastAPI's "There was an error parsing the body", raised from the JSON decoder's UnicodeDecodeError
            return error_response(request, 400, "malformed_json", f"the body is not UTF-8 JSON: {error.__cause__}")
        kind = (getattr(error, "error", None) or _STATUS_ERROR_KIND.get(error.status_code)
                or ("pipeline_failed" if error.status_code >= 500 else "http_error"))
        reason = str(error.detail)
        if error.status_code == 405:  # Starlette's "Method Not Allowed": say which method, where, and what is
            allowed = (error.headers or {}).get("Allow")
            reason = f"{request.method} is not allowed on {request.url.path}" + (f"; use {allowed}" if allowed else "")
        return error_response(request, error.status_code, kind, reason, getattr(error, "param", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.exception("unexpected server error")
        return error_response(request, 500, "server_error", f"{type(error).__name__}: {error}")

    ab = observability.ab if observability is not None else None
    _serve_only(app, served, lifecycle, ab)
    run_paths = {pipeline.run_path for pipeline in served.values()}
    work_paths = frozenset({*run_paths, *CHAT_PATHS})
    observed_paths = frozenset()
    if observability is not None and observability.enabled:
        observed_paths = add_observability(app, observability, PUBLIC_PATHS | run_paths, work_paths)
    # the request guard inside, the security guard outside it (Starlette: the last added is the outermost); the
    # observing middleware (metrics, traces, logs) outside both, so that it counts their refusals too
    app.add_middleware(RequestGuard, allowed_paths=PUBLIC_PATHS | run_paths | observed_paths,
                       max_body_bytes=max_body_bytes, work_paths=work_paths,
                       capacity=concurrency * len(served) + max_queue,
                       body_timeout=float(body_timeout), request_timeout=float(request_timeout))
    app.add_middleware(SecurityGuard, keys=api_keys, cors_origins=frozenset(cors_origins))
    if observability is not None and observability.enabled:  # outermost: it sees the guards' refusals too
        add_observing_middleware(app, observability, PUBLIC_PATHS | run_paths | observed_paths, work_paths)
    first = next(iter(served.values()))
    app.state.icr2_pipelines = served
    app.state.icr2_lifecycle = lifecycle
    app.state.icr2_spec = first.spec  # the first pipeline (a server of one: the pipeline)
    app.state.icr2_run_path = first.run_path
    app.state.icr2_wrapper = first.wrapper
    app.state.icr2_observability = observability
    return app


def _responses(prefix: str, catalogue: dict[int, dict[str, str]]) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": error_model(f"{prefix}Error{status}", status, kinds),
                     "description": " | ".join(f"{kind}: {when}" for kind, when in kinds.items())}
            for status, kinds in catalogue.items()}


def _serve_only(app: FastAPI, served: dict[str, ServedPipeline], lifecycle: Lifecycle, ab=None) -> None:
    """Add the routes the server answers, with their real error responses, and describe exactly those: a run
    route per pipeline, ``GET /status``, the health routes (``lifecycle``), ``GET /openapi.json`` (FastAPI's,
    added at construction; no docs pages) and the OpenAI routes (``openai_routes``: a model per pipeline,
    OpenAI-shaped errors, real streaming)."""
    for route in app.router.routes:  # Starlette adds HEAD to a GET route: /openapi.json answers GET only
        route.methods = {"GET"}
    names = list(served)

    async def status() -> StatusResponse:
        return StatusResponse(status="Up!", pipelines=names)

    app.add_api_route("/status", status, methods=["GET"], response_model=StatusResponse, tags=["status"],
                      operation_id="status_all", summary="Server status and the served pipelines",
                      responses=_responses("Status", STATUS_ERRORS))
    add_health_routes(app, lifecycle, _responses("Health", STATUS_ERRORS))
    for name, pipeline in served.items():
        spec, wrapper = pipeline.spec, pipeline.wrapper
        response_model = create_model(f"{name}RunResponse", __config__=ConfigDict(extra="forbid"),
                                      result=(wrapper.result_model, Field(..., description="the declared outputs")))
        app.add_api_route(pipeline.run_path, run_endpoint(spec, wrapper, pipeline.request_model, response_model),
                          methods=["POST"], response_model=response_model, name=f"{name}_run", tags=["pipelines"],
                          operation_id=f"{name}_run", summary=f"Run {name}",
                          description=(wrapper.run_api.__doc__ or "").strip().splitlines()[0] or None,
                          responses=_responses("Run", RUN_ERRORS))
    extra_schemas = add_openai_routes(app, served, ab)
    app.openapi_schema = None
    app.openapi = functools.partial(_openapi, app, served, extra_schemas)


def _openapi(app: FastAPI, served: dict[str, ServedPipeline], extra_schemas: dict[str, Any]) -> dict[str, Any]:
    if app.openapi_schema is None:
        techniques = ", ".join(f"{name} ({(p.spec.data.get('metadata') or {}).get('technique') or name}, "
                               f"`{p.spec.path}`) at `POST /{name}/run`" for name, p in served.items())
        models = ", ".join(f"`{name}`" for name in served)
        schema = get_openapi(
            title=f"icr2 serve: {', '.join(served)}", version=app.version, routes=app.routes,
            description=(f"{'One pipeline' if len(served) == 1 else 'Pipelines'}: {techniques}; and as the "
                         f"model{'s' if len(served) > 1 else ''} ({models}) of an OpenAI-compatible API at `/v1` "
                         "(`GET /v1/models`, `POST "
                         "/v1/chat/completions`; the last user message is the query). Every error of the icr2 "
                         "routes is `{\"error\", \"reason\", \"status\"}` JSON, and of the OpenAI routes "
                         "OpenAI's `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`; besides the "
                         "statuses listed per operation, a path not listed here is answered 404 (`not_found`) and a "
                         "method a path does not list 405 (`method_not_allowed`), in the shape of its route (OpenAI's "
                         "under `/v1/`). Every route may also answer the security guard's errors, in OpenAI's "
                         "shape: " + "; ".join(f"{status} {' | '.join(codes)}" for status, codes in
                                                SECURITY_ERRORS.items())
                         + " (401 only when the server has API keys; never on `/health/live`)."))
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, extra in extra_schemas.items():
            extra = dict(extra)
            schemas.update({**extra.pop("$defs", {}), name: extra})
        for path in OPENAI_PATHS:  # FastAPI's default 422 ({"detail": [...]}): those errors are our 400s there
            for operation in schema["paths"][path].values():
                operation["responses"].pop("422", None)
        if "HTTPValidationError" not in json.dumps(schema["paths"]):
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
        schema["paths"][OPENAPI_PATH] = {"get": {
            "tags": ["status"], "summary": "This OpenAPI document", "operationId": "openapi",
            "responses": {"200": {"description": "the OpenAPI 3.1 document of this server",
                                  "content": {"application/json": {"schema": {"type": "object"}}}},
                          **{str(status): response for status, response in
                             schema["paths"]["/status"]["get"]["responses"].items() if status != "200"}}}}
        app.openapi_schema = schema
    return app.openapi_schema


class _JsonBadRequest:
    """Mixin for uvicorn's HTTP protocol classes: the 400 its parser answers (before any ASGI code) is our JSON."""

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this from the `except` around its parser, so the parser's own error is the one in flight
        parser_error = sys.exc_info()[1]
        detail = str(parser_error) if parser_error is not None and str(parser_error) else msg
        payload = json.dumps(error_body(400, "bad_request", f"the request is not valid HTTP/1.1: {detail}")).encode()
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: " + str(len(payload)).encode() + b"\r\n",
                 b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + payload)
        self.transport.close()


@functools.cache
def json_error_http_protocol(implementation: str = "auto") -> type:
    """uvicorn's HTTP protocol, answering its parser's errors as JSON: ``"httptools"``, ``"h11"``, or ``"auto"``
    (as uvicorn's own: httptools when it is installed, else h11). ``server_settings`` passes it as ``http``."""
    if implementation == "auto":
        try:
            import httptools  # noqa: F401

            implementation = "httptools"
        except ImportError:
            implementation = "h11"
    if implementation == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    elif implementation == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    else:
        raise ValueError(f"implementation must be 'auto', 'httptools' or 'h11', got {implementation!r}.")
    return type(f"JsonError{base.__name__}", (_JsonBadRequest, base), {})


def server_settings(grace_seconds: float = 5.0) -> dict[str, Any]:
    """The uvicorn settings ``run_server`` uses (quiet, JSON parser errors, ``grace_seconds`` for requests in
    flight at shutdown); a test server built with ``uvicorn.Config(app, host=..., port=..., **server_settings())``
    answers as ``icr2 serve`` does."""
    return {"log_level": "warning", "timeout_graceful_shutdown": grace_seconds, "http": json_error_http_protocol()}


def check_tls_files(certfile: str | None, keyfile: str | None) -> None:
    """Both TLS files or neither, each readable.

    :raises UserInputError: one line naming the option and the file.
    """
    if (certfile is None) != (keyfile is None):
        raise UserInputError("--tls-cert and --tls-key go together: give the certificate (PEM) and its private key.")
    for option, path in (("--tls-cert", certfile), ("--tls-key", keyfile)):
        if path is None:
            continue
        try:
            with open(path, "rb") as handle:
                head = handle.read(4096)
        except OSError as error:
            raise UserInputError(f"{option} {path}: cannot read it ({error.strerror or error}); give a PEM "
                                 "file.") from error
        if b"-----BEGIN" not in head:
            raise UserInputError(f"{option} {path}: not a PEM file (no -----BEGIN line); give a PEM certificate "
                                 "and key.")


def bind_server_socket(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (as uvicorn binds one: ``SO_REUSEADDR``, IPv6 for a host with a
    colon), for ``run_server(..., sock=...)``: binding before the pipeline loads and the banner prints makes a port
    in use an error at once, and no other program can take the port in between.

    :raises UserInputError: one line naming the address: in use, not an address of this machine, or not allowed.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as error:
        sock.close()
        code = getattr(error, "errno", None)
        if code == errno.EADDRINUSE:
            raise UserInputError(f"--port {port}: {host}:{port} is already in use by another program; stop it or "
                                 "serve on another port (icr2 serve --port N).") from error
        if code == errno.EACCES:
            raise UserInputError(f"--port {port}: binding {host}:{port} is not allowed for this user (ports below "
                                 "1024 need privileges); serve on another port (icr2 serve --port N).") from error
        reason = getattr(error, "strerror", None) or str(error)
        raise UserInputError(f"--host {host} --port {port}: cannot listen there ({reason}); give an address of "
                             "this machine (default 127.0.0.1).") from error
    sock.set_inheritable(True)
    return sock


def run_server(app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, allow_remote: bool = False,
               sock: socket.socket | None = None, *, grace_seconds: float = DEFAULT_GRACE_SECONDS,
               tls_certfile: str | None = None, tls_keyfile: str | None = None) -> None:
    """Run ``app`` with uvicorn (``server_settings``: its HTTP parser's 400s are JSON too) until SIGTERM or Ctrl-C.

    A non-loopback ``host`` needs API keys on the app (``create_serving_app(api_keys=...)``) or
    ``allow_remote=True`` (``--no-auth``: open to everyone who can reach it). ``sock``: a socket already bound to
    ``host``:``port`` (``bind_server_socket``), served as it is; None binds here (a port in use is then uvicorn's
    own error). On SIGTERM the server drains: no new connections, requests in flight (streams included) finish
    within ``grace_seconds``, then it returns (the process exits 0). ``tls_certfile``/``tls_keyfile``: serve HTTPS
    with that certificate (PEM).

    :raises ValueError: a non-loopback host without keys or ``allow_remote``.
    :raises UserInputError: the TLS files are not both given, or not readable PEM.
    :raises Exception: a pipeline loaded in the background failed (its own error), after the server stopped.
    """
    lifecycle: Lifecycle | None = getattr(app.state, "icr2_lifecycle", None)
    has_keys = _has_keys(app)
    if host not in LOOPBACK_HOSTS and not (allow_remote or has_keys):
        raise ValueError(f"--host {host} is not a loopback address and the server has no API keys; give "
                         "--api-keys-file FILE or --api-keys-env NAME, or --no-auth to serve it open to everyone "
                         "who can reach it (behind a proxy that authenticates).")
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int | float) or not (
            0 <= grace_seconds <= MAX_TIMEOUT_S):
        raise ValueError(f"grace_seconds must be a number of seconds from 0 to {MAX_TIMEOUT_S:g}, got "
                         f"{grace_seconds!r}.")
    check_tls_files(tls_certfile, tls_keyfile)
    import uvicorn

    settings = server_settings(grace_seconds)
    if tls_certfile is not None:
        settings.update(ssl_certfile=tls_certfile, ssl_keyfile=tls_keyfile)
    server = graceful_server_class()(uvicorn.Config(app, host=host, port=port, **settings), lifecycle=lifecycle)
    if lifecycle is not None:
        lifecycle.stop_server = lambda: setattr(server, "should_exit", True)
    server.run(sockets=[sock] if sock is not None else None)
    if lifecycle is not None and lifecycle.failure is not None:
        raise lifecycle.failure


def _has_keys(app: FastAPI) -> bool:
    return any(middleware.cls is SecurityGuard and middleware.kwargs.get("keys") is not None
               for middleware in app.user_middleware)


__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_PORT",
    "DEFAULT_REQUEST_TIMEOUT",
    "PUBLIC_PATHS",
    "RUN_ERRORS",
    "RequestGuard",
    "bind_server_socket",
    "check_tls_files",
    "create_serving_app",
    "json_error_http_protocol",
    "non_finite_json_number",
    "run_server",
    "server_settings",
]
