"""``icr2 serve``: one library pipeline behind hayhooks' FastAPI app, loopback by default, JSON errors.

The pipeline is loaded by ``PipelineSpec`` (our allowlisted loader), wrapped in ``DeclaredPipelineWrapper`` and
committed to hayhooks' registry and app programmatically (``commit_prepared_pipeline``), so hayhooks builds the
``POST /<name>/run`` route and its handler. Around it:

* requests are validated by a model built from the declared ``inputs`` (unknown fields refused, ``query`` a
  non-empty string of at most ``max_query_chars``): malformed JSON -> 400, missing/wrong fields -> 422;
* a body over ``max_body_bytes`` -> 413 (checked on Content-Length and on the bytes actually read);
* a request the model cannot take (its prompt is over the reader's context) -> 413 ``context_too_long``, naming
  the limit (``refusals``); any other pipeline failure -> 500; every error as
  ``{"error": ..., "reason": ..., "status": ...}``;
* only the run route, ``/status`` and the API docs are reachable: hayhooks' deploy/undeploy routes are not,
  so nobody can deploy another (non-allowlisted) pipeline into a running server.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from icr2_components.evaluation.pipeline_spec import PipelineSpec
from icr2_components.serving.pipeline_wrapper import DeclaredPipelineWrapper
from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS, build_request_model

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1416
DEFAULT_MAX_BODY_BYTES = 64 * 1024
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
PUBLIC_PATHS = {"/status", "/docs", "/openapi.json", "/redoc"}

logger = logging.getLogger(__name__)


def error_body(status: int, error: str, reason: str) -> dict[str, Any]:
    return {"error": error, "reason": reason, "status": status}


class RequestGuard:
    """ASGI middleware: path allowlist (404) and a request-size limit (413), both answered as JSON."""

    def __init__(self, app, allowed_paths: set[str], max_body_bytes: int) -> None:
        self.app = app
        self.allowed_paths = allowed_paths
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path not in self.allowed_paths:
            await _send_json(send, 404, error_body(404, "not_found",
                                                   f"{path} is not served; try {sorted(self.allowed_paths)}"))
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_big = error_body(413, "request_too_large",
                             f"the request body is over the limit of {self.max_body_bytes} bytes "
                             "(icr2 serve --max-body-bytes raises it)")
        if declared is not None:
            try:
                if int(declared) > self.max_body_bytes:
                    await _drain_and_send(receive, send, 413, too_big)
                    return
            except ValueError:
                await _send_json(send, 400, error_body(400, "bad_request", "Content-Length is not an integer"))
                return
        # Read the body here (at most the limit + 1 byte), then replay it: a chunked body is bounded too.
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _drain_and_send(receive, send, 413, too_big, more=message.get("more_body", False))
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _drain_and_send(receive, send, status: int, body: dict, more: bool = True) -> None:
    # Read what the client still sends (discarding it) so it sees the answer instead of a reset connection.
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        more = message.get("more_body", False)
    await _send_json(send, status, body)


async def _send_json(send, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def _validation_reason(errors: list[dict]) -> tuple[int, str, str]:
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid")
        return 400, "malformed_json", f"the body is not valid JSON: {(detail.get('ctx') or {}).get('error', detail.get('msg'))}"
    parts = []
    for e in errors:
        location = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{location}: {e.get('msg')}")
    return 422, "invalid_request", "; ".join(parts)


def _configure_hayhooks() -> None:
    from hayhooks.settings import settings

    settings.pipelines_dir = ""          # deploy nothing from a folder: only the pipeline we load ourselves
    settings.tracing_enabled = False     # no local trace buffer, no dashboard credentials written
    settings.monitoring_enabled = False
    settings.cors_allow_origins = []     # no browser page on another origin may call the loopback server
    settings.show_tracebacks = False


def create_serving_app(pipeline_path: str, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                       max_query_chars: int = DEFAULT_MAX_QUERY_CHARS, max_new_tokens: int | None = None,
                       concurrency: int = 1) -> FastAPI:
    """Build hayhooks' app serving ``pipeline_path`` at ``POST /<file stem>/run``; models are loaded now.

    Usage example:
    ```python
    from icr2_components.serving import create_serving_app, run_server

    app = create_serving_app("pipelines/closed_book.yaml", max_new_tokens=16)
    run_server(app, host="127.0.0.1", port=1416)   # POST /closed_book/run {"query": "..."}
    ```
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}.")
    spec = PipelineSpec.from_file(str(pipeline_path))  # allowlisted load, declared IO checked
    request_model = build_request_model(spec, max_query_chars=max_query_chars)
    wrapper = DeclaredPipelineWrapper(spec, max_new_tokens=max_new_tokens, concurrency=concurrency)
    wrapper.setup()

    _configure_hayhooks()
    from hayhooks.server.app import create_app
    from hayhooks.server.utils.deploy_utils import commit_prepared_pipeline
    from hayhooks.server.utils.models import PreparedPipeline

    app = create_app()
    description = (spec.data.get("metadata") or {}).get("technique") or spec.name
    commit_prepared_pipeline(
        PreparedPipeline(name=spec.name, wrapper=wrapper,
                         extra_metadata={"request_model": request_model, "description": description}),
        app=app, overwrite=True,
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        status, kind, reason = _validation_reason(list(error.errors()))
        return JSONResponse(error_body(status, kind, reason), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = getattr(error, "error", None) or ("pipeline_failed" if error.status_code >= 500 else "http_error")
        return JSONResponse(error_body(error.status_code, kind, str(error.detail)), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, error: Exception) -> JSONResponse:
        logger.exception("unexpected server error")
        return JSONResponse(error_body(500, "server_error", f"{type(error).__name__}: {error}"), status_code=500)

    app.add_middleware(RequestGuard, allowed_paths=PUBLIC_PATHS | {f"/{spec.name}/run"},
                       max_body_bytes=max_body_bytes)
    app.state.icr2_spec = spec
    app.state.icr2_run_path = f"/{spec.name}/run"
    return app


def run_server(app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, allow_remote: bool = False) -> None:
    """Run ``app`` with uvicorn; a non-loopback ``host`` needs ``allow_remote=True`` (the server has no auth)."""
    if host not in LOOPBACK_HOSTS and not allow_remote:
        raise ValueError(f"--host {host} is not a loopback address and the server has no authentication; "
                         "pass --allow-remote to bind it anyway (behind a proxy that authenticates).")
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)


__all__ = ["DEFAULT_HOST", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_PORT", "RequestGuard", "create_serving_app",
           "run_server"]
