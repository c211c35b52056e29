"""Serving library pipelines over HTTP (``icr2 serve``; FastAPI, and a hayhooks pipeline wrapper), loaded with our
allowlisted loader: at
``POST /<name>/run`` and as an OpenAI-compatible chat model (``/v1/models``, ``/v1/chat/completions``)."""

from icr2_components.extras import require_extra

# without the `serve` extra, one line naming it rather than FastAPI's ModuleNotFoundError from deep inside
require_extra("serve", "icr2_components.serving", ("hayhooks", "fastapi", "uvicorn"))

from icr2_components.serving.app import (  # noqa: E402 - after the extra check
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    PUBLIC_PATHS,
    RequestGuard,
    create_serving_app,
    json_error_http_protocol,
    run_server,
    server_settings,
)
from icr2_components.serving.openai_routes import OPENAI_PATHS  # noqa: E402
from icr2_components.serving.pipeline_wrapper import ChatAnswer, DeclaredPipelineWrapper, to_json  # noqa: E402
from icr2_components.serving.refusals import RequestRefused, refusal_for  # noqa: E402
from icr2_components.serving.request_model import (  # noqa: E402
    DEFAULT_MAX_QUERY_CHARS,
    DocumentIn,
    build_request_model,
)
from icr2_components.serving.response_model import DocumentOut, build_result_model  # noqa: E402

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_PORT",
    "OPENAI_PATHS",
    "PUBLIC_PATHS",
    "ChatAnswer",
    "DeclaredPipelineWrapper",
    "DocumentIn",
    "DocumentOut",
    "RequestGuard",
    "RequestRefused",
    "build_request_model",
    "build_result_model",
    "create_serving_app",
    "json_error_http_protocol",
    "refusal_for",
    "run_server",
    "server_settings",
    "to_json",
]
