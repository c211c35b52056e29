"""Metrics, traces, request logs and the A/B log of ``icr2 serve``: what to observe (``Observability``) and the
outermost ASGI middleware that observes every request (``ObservingMiddleware``).

The middleware is outside the security guard, so it sees every answer, the 401s and 429s included: it makes the
request's ``Observation`` (``serving.observation``), opens the request's OpenTelemetry span (continuing the
caller's W3C ``traceparent``; its trace id answered in ``X-Trace-ID``), and, before the answer's last byte is sent,
counts the request (``serving.metrics``), writes its JSON log line (``serving.request_log``) and, for a request of
the A/B model, appends and fsyncs its A/B record (``serving.ab_split``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

from icr2_components.serving.ab_split import USER_HEADER, ABLog, ABSplit
from icr2_components.serving.metrics import METRICS_PATH, ServingMetrics
from icr2_components.serving.observation import Observation, reset, start
from icr2_components.serving.request_log import RequestLog
from icr2_components.serving.tracing import TRACE_ID_HEADER, install_serving_tracer

REQUEST_SPAN = "icr2.serve.request"
_MAX_USER_CHARS = 256


@dataclass
class Observability:
    """What a serving app observes; each part is off when None.

    :param metrics: counted and served at ``GET /metrics``.
    :param tracer_provider: an OpenTelemetry ``TracerProvider`` the request and component spans go to
        (``tracing.tracer_provider_from_env``; tests give one with the SDK's in-memory exporter).
    :param request_log: one JSON line per request.
    :param ab: the A/B split of one model name over served pipelines, with ``ab_log`` its log.
    """

    metrics: ServingMetrics | None = None
    tracer_provider: Any = None
    request_log: RequestLog | None = None
    ab: ABSplit | None = None
    ab_log: ABLog | None = None

    def __post_init__(self) -> None:
        if (self.ab is None) != (self.ab_log is None):
            raise ValueError("an A/B split needs its log and a log its split: give ab and ab_log together.")

    @functools.cached_property
    def otel_tracer(self):
        return None if self.tracer_provider is None else self.tracer_provider.get_tracer("icr2_components.serving")

    @property
    def enabled(self) -> bool:
        return any(part is not None for part in (self.metrics, self.tracer_provider, self.request_log, self.ab))

    def close(self) -> None:
        """Flush the spans and close the logs (at shutdown)."""
        if self.tracer_provider is not None and hasattr(self.tracer_provider, "force_flush"):
            self.tracer_provider.force_flush()
        for log in (self.request_log, self.ab_log):
            if log is not None:
                log.close()


class ObservingMiddleware:
    """ASGI middleware: each HTTP request observed (module docstring).

    :param known_paths: the served paths (others are counted under the route ``other``).
    :param work_paths: the paths that run a pipeline (for the queue depth).
    """

    def __init__(self, app, observability: Observability, known_paths: frozenset[str],
                 work_paths: frozenset[str]) -> None:
        self.app = app
        self.observability = observability
        self.known_paths = known_paths
        self.work_paths = work_paths
        if observability.otel_tracer is not None:
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            self._propagator = TraceContextTextMapPropagator()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sinks = self.observability
        path = scope.get("path", "")
        observation = Observation(method=scope.get("method", ""), path=path,
                                  route=path if path in self.known_paths else "other", sinks=sinks)
        headers = {name.lower(): value for name, value in scope.get("headers") or []}
        user = headers.get(USER_HEADER.encode())
        if user:
            observation.user = user.decode("latin-1")[:_MAX_USER_CHARS]
        token = start(observation)
        work = path in self.work_paths
        if sinks.metrics is not None:
            sinks.metrics.in_flight.inc()
            if work:
                sinks.metrics.work_admitted(+1)
        finished = False

        async def finish() -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            await self._finish(observation)

        async def observed_send(message) -> None:
            if message["type"] == "http.response.start":
                observation.status = message["status"]
                extra = []
                for name, value in message.get("headers") or []:
                    if name.lower() == b"x-request-id":
                        observation.request_id = value.decode("latin-1")
                if observation.trace_id:
                    extra.append((TRACE_ID_HEADER.encode(), observation.trace_id.encode()))
                if extra:
                    message = {**message, "headers": [*(message.get("headers") or []), *extra]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await finish()  # counted and logged before the client has the whole answer
            await send(message)

        try:
            with self._request_span(observation, headers) as span:
                try:
                    await self.app(scope, receive, observed_send)
                finally:
                    await finish()  # a client that went away, or an app that raised
                    if span is not None:
                        _end_request_span(span, observation)
        finally:
            if sinks.metrics is not None:
                sinks.metrics.in_flight.dec()
                if work:
                    sinks.metrics.work_admitted(-1)
            reset(token)

    @contextlib.contextmanager
    def _request_span(self, observation: Observation, headers: dict[bytes, bytes]):
        tracer = self.observability.otel_tracer
        if tracer is None:
            yield None
            return
        from opentelemetry.trace import SpanKind

        carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers.items()
                   if name in (b"traceparent", b"tracestate")}
        parent = self._propagator.extract(carrier) if carrier else None
        with tracer.start_as_current_span(REQUEST_SPAN, context=parent, kind=SpanKind.SERVER,
                                          attributes={"http.request.method": observation.method,
                                                      "http.route": observation.route}) as span:
            observation.trace_id = format(span.get_span_context().trace_id, "032x")
            yield span

    async def _finish(self, observation: Observation) -> None:
        observation.latency_s = time.perf_counter() - observation.started
        sinks = self.observability
        if sinks.metrics is not None:
            sinks.metrics.request_done(observation)
        if sinks.ab_log is not None and observation.arm and observation.status == 200:
            await asyncio.to_thread(sinks.ab_log.append, observation)  # fsynced: not on the event loop
        if sinks.request_log is not None:
            sinks.request_log.write(observation)


def _end_request_span(span, observation: Observation) -> None:
    span.set_attribute("http.response.status_code", observation.status or 0)
    if observation.pipeline:
        span.set_attribute("icr2.pipeline", observation.pipeline)
    if observation.request_id:
        span.set_attribute("icr2.request_id", observation.request_id)
    if observation.arm:
        span.set_attribute("icr2.ab.arm", observation.arm)
    for name, count in observation.tokens.items():
        if count is not None:
            span.set_attribute(f"icr2.{name}", count)
    if (observation.status or 0) >= 500:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))


def add_observability(app: FastAPI, observability: Observability, known_paths: set[str] | frozenset[str],
                      work_paths: frozenset[str]) -> frozenset[str]:
    """Serve ``GET /metrics`` (with metrics), install the Haystack tracer and add the observing middleware, which
    must be added last (the outermost). :returns: the paths added (for the request guard's allowlist)."""
    added: set[str] = set()
    if observability.metrics is not None:
        metrics = observability.metrics

        async def scrape() -> Response:
            return Response(metrics.render(), media_type=metrics.content_type)

        app.add_api_route(METRICS_PATH, scrape, methods=["GET"], include_in_schema=False)
        added.add(METRICS_PATH)
    if observability.enabled:
        install_serving_tracer()  # component times, tokens and technique signals come through Haystack's tracing
    return frozenset(added)


def add_observing_middleware(app: FastAPI, observability: Observability, known_paths: set[str] | frozenset[str],
                             work_paths: frozenset[str]) -> None:
    """The observing middleware, outermost (add it after every other middleware)."""
    app.add_middleware(ObservingMiddleware, observability=observability, known_paths=frozenset(known_paths),
                       work_paths=work_paths)


__all__ = ["Observability", "ObservingMiddleware", "add_observability", "add_observing_middleware"]
