"""The life cycle of ``icr2 serve``: loading, ready, draining; the health routes; a graceful SIGTERM.

* ``GET /health/live`` (no key needed): 200 ``{"status": "live"}`` while the process answers at all, loading
  included; a process manager restarts the server when it stops answering.
* ``GET /health/ready``: 200 ``{"status": "ready", "pipelines": [...]}`` only once every served pipeline is warmed
  up (its models loaded, its indexes open), 503 ``{"status": "loading" | "draining" | "failed", ...}`` with
  ``Retry-After`` before and after; a load balancer sends traffic only to a ready server. (With API keys it
  needs the key, as every route but liveness.)
* On SIGTERM the server is draining: it stops accepting connections, closes idle ones, lets every request in flight
  finish (a streamed answer included) within the grace period (``--grace-seconds``), then exits 0. A request still
  running at the end of the grace period is cut off. A second Ctrl-C (SIGINT) exits at once, as uvicorn's.

``Lifecycle.warm_up_in_background`` loads the pipelines after the server has started (so liveness answers while a
large model loads); a request that arrives meanwhile waits for its pipeline (``DeclaredPipelineWrapper.setup`` is
locked), within the request timeout. A pipeline that fails to load stops the server, and ``run_server`` raises its
error.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

LIVE_PATH = "/health/live"
READY_PATH = "/health/ready"
HEALTH_PATHS = frozenset({LIVE_PATH, READY_PATH})
DEFAULT_GRACE_SECONDS = 30.0

State = Literal["loading", "ready", "draining", "failed"]

logger = logging.getLogger(__name__)


class Lifecycle:
    """Where the server is in its life: ``loading`` -> ``ready`` -> ``draining`` (or ``failed`` when a pipeline
    could not load). Thread-safe.

    :param pipelines: the served pipelines' names (for the readiness answer).
    """

    def __init__(self, pipelines: Sequence[str]) -> None:
        self.pipelines = list(pipelines)
        self._lock = threading.Lock()
        self.state: State = "loading"
        self.loaded: list[str] = []
        self.failure: BaseException | None = None
        self.ready_event = threading.Event()
        self.stop_server: Callable[[], None] | None = None  # set by run_server: ends the server on a failed load
        self.started = time.monotonic()
        self.ready_after_s: float | None = None

    def mark_loaded(self, name: str) -> None:
        with self._lock:
            self.loaded.append(name)

    def mark_ready(self) -> None:
        with self._lock:
            if self.state == "loading":
                self.state = "ready"
                self.ready_after_s = time.monotonic() - self.started
        self.ready_event.set()

    def mark_draining(self) -> None:
        with self._lock:
            if self.state != "failed":
                self.state = "draining"

    def mark_failed(self, error: BaseException) -> None:
        with self._lock:
            self.state, self.failure = "failed", error
        self.ready_event.set()
        if self.stop_server is not None:
            self.stop_server()

    def warm_up(self, wrappers: dict[str, Any]) -> None:
        """Load every pipeline (``setup``) now, in this thread; then ready, or failed with the first error."""
        try:
            for name, wrapper in wrappers.items():
                wrapper.setup()
                self.mark_loaded(name)
        except Exception as error:  # the server cannot serve: readiness says so, and run_server raises it
            logger.info("a served pipeline failed to load: %s: %s", type(error).__name__, error)
            self.mark_failed(error)
            return
        self.mark_ready()

    def warm_up_in_background(self, wrappers: dict[str, Any]) -> threading.Thread:
        thread = threading.Thread(target=self.warm_up, args=(wrappers,), name="icr2-serve-warm-up", daemon=True)
        thread.start()
        return thread


class LiveResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["live"] = Field(..., description="the process answers")


class ReadyResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: State = Field(..., description="ready: every pipeline is loaded and requests are taken")
    pipelines: list[str] = Field(..., description="the served pipelines")
    loaded: list[str] = Field(..., description="the pipelines loaded so far")
    error: str | None = Field(None, description="why a pipeline could not load (status failed)")


def add_health_routes(app: FastAPI, lifecycle: Lifecycle, error_responses: dict | None = None) -> None:
    """Add ``GET /health/live`` and ``GET /health/ready`` (see the module docstring); ``error_responses``: the
    errors the server's guards may answer on any GET (documented on both)."""
    errors = dict(error_responses or {})

    async def live() -> LiveResponse:
        return LiveResponse(status="live")

    async def ready() -> ReadyResponse:
        failure = lifecycle.failure
        body = ReadyResponse(status=lifecycle.state, pipelines=lifecycle.pipelines, loaded=list(lifecycle.loaded),
                             error=f"{type(failure).__name__}: {failure}" if failure is not None else None)
        if lifecycle.state == "ready":
            return body
        return JSONResponse(body.model_dump(exclude_none=True), status_code=503, headers={"retry-after": "5"})

    app.add_api_route(LIVE_PATH, live, methods=["GET"], response_model=LiveResponse, tags=["health"],
                      operation_id="health_live", summary="Liveness: the process answers (no key needed)",
                      responses=errors)
    app.add_api_route(READY_PATH, ready, methods=["GET"], response_model=ReadyResponse, tags=["health"],
                      response_model_exclude_none=True,
                      operation_id="health_ready", summary="Readiness: every pipeline loaded, not draining",
                      responses={**errors, 503: {"model": ReadyResponse,
                                                 "description": "loading, draining or failed; Retry-After says when "
                                                                "to ask again"}})


def graceful_server_class():
    """``uvicorn.Server`` that marks the life cycle draining on SIGTERM/SIGINT and exits 0 after a SIGTERM's
    graceful shutdown (uvicorn re-raises the signal once it has shut down, which would end the process with
    -SIGTERM: a process manager would count a clean stop as a crash)."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        def __init__(self, config, lifecycle: Lifecycle | None = None) -> None:
            super().__init__(config)
            self.lifecycle = lifecycle

        def handle_exit(self, sig: int, frame) -> None:
            if self.lifecycle is not None:
                self.lifecycle.mark_draining()
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM:  # a SIGTERM drained gracefully is a clean stop: exit 0, not -15
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    while signal.SIGTERM in captured:
                        captured.remove(signal.SIGTERM)

    return GracefulServer


__all__ = ["DEFAULT_GRACE_SECONDS", "HEALTH_PATHS", "LIVE_PATH", "READY_PATH", "Lifecycle", "add_health_routes",
           "graceful_server_class"]
