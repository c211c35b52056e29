"""Serving library pipelines over HTTP (``icr2 serve``; FastAPI, and a hayhooks pipeline wrapper), loaded with our
allowlisted loader: one or several pipelines, each at ``POST /<name>/run`` and as a model of an OpenAI-compatible
API (``/v1/models``, ``/v1/chat/completions``), with API keys (``auth``, ``security``), health routes and a
graceful SIGTERM (``lifecycle``)."""

from icr2_components.extras import require_extra

# without the `serve` extra, one line naming it rather than FastAPI's ModuleNotFoundError from deep inside
require_extra("serve", "icr2_components.serving", ("hayhooks", "fastapi", "uvicorn"))

from icr2_components.serving.app import create_serving_app, run_server  # noqa: E402 - after the extra check

__all__ = [
    "create_serving_app",
    "run_server",
]
