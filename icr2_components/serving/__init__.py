"""Serving library pipelines over HTTP through hayhooks (``icr2 serve``), loaded with our allowlisted loader."""

from icr2_components.serving.app import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    RequestGuard,
    create_serving_app,
    run_server,
)
from icr2_components.serving.pipeline_wrapper import DeclaredPipelineWrapper, to_json
from icr2_components.serving.refusals import RequestRefused, refusal_for
from icr2_components.serving.request_model import DEFAULT_MAX_QUERY_CHARS, DocumentIn, build_request_model

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_PORT",
    "DeclaredPipelineWrapper",
    "DocumentIn",
    "RequestGuard",
    "RequestRefused",
    "build_request_model",
    "create_serving_app",
    "refusal_for",
    "run_server",
    "to_json",
]
