"""Traces of ``icr2 serve``: an OpenTelemetry span per request, continued from the caller's W3C ``traceparent``,
and under it Haystack's spans (the pipeline run, a span per component) with the techniques' attributes.

``ServingTracer`` is a Haystack ``Tracer`` (``haystack.tracing.enable_tracing``), installed once per process by
``install_serving_tracer``. Haystack calls it for the pipeline run and for every component run; during a request
of an app with observability (``observation.current()``) it times each component for the metrics
(``icr2_serve_component_seconds``), reads the techniques' signals from the component's outputs (the gate's
decision and score, the passages RAP kept, the corpus builder's budget used: ``metrics.technique_signals``) and the
readers' token counts, and, when the app traces, opens an OpenTelemetry span named ``haystack.component.run`` with
Haystack's tags and those signals as ``icr2.*`` attributes. Outside such a request it hands over to the tracer that
was enabled before it (none: nothing is traced).

Content (the prompt, the documents, the answer) goes onto spans only when Haystack's content tracing is opted in
(``HAYSTACK_CONTENT_TRACING_ENABLED=true``); the outputs are read for the signals either way, never recorded.

Export follows the standard OpenTelemetry variables (``tracer_provider_from_env``): ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or ``OTEL_TRACES_EXPORTER=otlp``) -> OTLP over HTTP to that collector;
``OTEL_TRACES_EXPORTER=console`` -> spans printed to stdout; ``none`` -> none sent; ``OTEL_SERVICE_NAME`` names the
service (default ``icr2-serve``). ``icr2 serve --trace`` with none of them set exports OTLP to the SDK's default,
``http://localhost:4318`` (a collector on the same host).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from haystack import tracing
from haystack.tracing import Span, Tracer
from haystack.tracing.tracer import NullSpan, NullTracer

from icr2_components.serving.metrics import technique_signals
from icr2_components.serving.observation import current

TRACE_ID_HEADER = "x-trace-id"
SERVICE_NAME = "icr2-serve"
COMPONENT_RUN = "haystack.component.run"
PIPELINE_RUN = "haystack.pipeline.run"
_MAX_ATTRIBUTE_CHARS = 4096
_install_lock = threading.Lock()


def otel_exporter_configured(environ: dict[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces to be exported."""
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter) or bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracer_provider_from_env(environ: dict[str, str] | None = None):
    """An OpenTelemetry SDK ``TracerProvider`` exporting where the ``OTEL_*`` variables say (a batch processor: the
    request never waits for the collector). As in OpenTelemetry's own SDKs, the exporter is OTLP unless
    ``OTEL_TRACES_EXPORTER`` names another (``console``, or ``none``: spans made, trace ids answered, nothing sent),
    to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``).

    :raises UserInputError: ``OTEL_TRACES_EXPORTER`` names an exporter other than otlp, console or none.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from icr2_components.errors import UserInputError

    env = os.environ if environ is None else environ
    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAME}))
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter != "none":
        if exporter != "otlp":
            raise UserInputError(f"OTEL_TRACES_EXPORTER={exporter!r} is not supported by icr2 serve; use otlp (with "
                                 "OTEL_EXPORTER_OTLP_ENDPOINT), console or none.")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def attribute(value: Any) -> Any:
    """A value as an OpenTelemetry attribute: a plain scalar as is, anything else as (truncated) JSON text."""
    if isinstance(value, str | bool | int | float):
        return value if not isinstance(value, str) else value[:_MAX_ATTRIBUTE_CHARS]
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text[:_MAX_ATTRIBUTE_CHARS]


class ServingSpan(Span):
    """A Haystack span during a served request: the OpenTelemetry span (None when the app does not trace) and the
    component's outputs' signals, read whether or not content tracing is on."""

    def __init__(self, otel_span, operation_name: str, tags: dict[str, Any]) -> None:
        self._otel = otel_span
        self.operation_name = operation_name
        self.tags = dict(tags)
        self.signals: dict[str, Any] = {}
        self.outputs: Any = None

    def set_tag(self, key: str, value: Any) -> None:
        self.tags[key] = value
        if self._otel is not None:
            self._otel.set_attribute(key, attribute(value))

    def set_content_tag(self, key: str, value: Any) -> None:
        if key == "haystack.component.output":
            self.outputs = value
            self.signals = technique_signals(value)
            if self._otel is not None:
                for name, signal in self.signals.items():
                    self._otel.set_attribute(f"icr2.{name}", attribute(signal))
        if tracing.tracer.is_content_tracing_enabled:  # the opt-in: Haystack's own switch
            self.set_tag(key, value)

    def raw_span(self) -> Any:
        return self._otel if self._otel is not None else self

    def get_correlation_data_for_logs(self) -> dict[str, Any]:
        if self._otel is None:
            return {}
        context = self._otel.get_span_context()
        return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


class ServingTracer(Tracer):
    """The process's Haystack tracer while ``icr2 serve`` apps with observability run (module docstring)."""

    def __init__(self, fallback: Tracer | None = None) -> None:
        self.fallback = fallback
        self._local = threading.local()

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None,
              parent_span: Span | None = None) -> Iterator[Span]:
        observation = current()
        sinks = getattr(observation, "sinks", None)
        if sinks is None:  # not a request of an observed app: whatever tracer was there before
            if self.fallback is None:
                yield NullSpan()
            else:
                with self.fallback.trace(operation_name, tags=tags, parent_span=parent_span) as span:
                    yield span
            return
        tags = tags or {}
        otel_tracer = sinks.otel_tracer
        metrics = sinks.metrics
        started = time.perf_counter()
        if metrics is not None and operation_name == PIPELINE_RUN:
            metrics.run_started(+1)
        try:
            if otel_tracer is None:
                span = ServingSpan(None, operation_name, tags)
                yield span
            else:
                with otel_tracer.start_as_current_span(operation_name) as otel_span:
                    span = ServingSpan(otel_span, operation_name, {})
                    for key, value in tags.items():
                        if key in ("haystack.component.name", "haystack.component.type"):
                            span.set_tag(key, value)
                    if observation.pipeline:
                        otel_span.set_attribute("icr2.pipeline", observation.pipeline)
                    yield span
        finally:
            if metrics is not None and operation_name == PIPELINE_RUN:
                metrics.run_started(-1)
        if operation_name == COMPONENT_RUN:
            seconds = time.perf_counter() - started
            name = str(tags.get("haystack.component.name", ""))
            kind = str(tags.get("haystack.component.type", ""))
            observation.components[name] = observation.components.get(name, 0.0) + seconds
            if span.signals:
                observation.signals[name] = span.signals
            _count_tokens(observation, span.outputs)
            if metrics is not None:
                metrics.component_ran(observation.pipeline or "", name, kind, seconds, span.signals)

    def current_span(self) -> Span | None:
        if self.fallback is not None and getattr(current(), "sinks", None) is None:
            return self.fallback.current_span()
        return None


def _count_tokens(observation, outputs: Any) -> None:
    """Add the token counts of a reader's replies (``prompt_tokens``/``completion_tokens`` in a reply's meta), each
    reply once (a component that passes replies on does not count them again)."""
    if not isinstance(outputs, dict):
        return
    replies = outputs.get("replies")
    if not isinstance(replies, list):
        return
    for reply in replies:
        meta = getattr(reply, "meta", None)
        if not isinstance(meta, dict) or id(reply) in observation.counted_replies:
            continue
        observation.counted_replies.add(id(reply))
        if isinstance(meta.get("prompt_tokens"), int):
            observation.prompt_tokens = (observation.prompt_tokens or 0) + meta["prompt_tokens"]
        if isinstance(meta.get("completion_tokens"), int):
            observation.completion_tokens = (observation.completion_tokens or 0) + meta["completion_tokens"]


def install_serving_tracer() -> ServingTracer:
    """Make ``ServingTracer`` Haystack's tracer (once per process; the tracer enabled before it is kept for work
    outside served requests). :returns: the installed tracer."""
    with _install_lock:
        actual = tracing.tracer.actual_tracer
        if isinstance(actual, ServingTracer):
            return actual
        fallback = None if isinstance(actual, NullTracer) else actual
        serving = ServingTracer(fallback)
        tracing.enable_tracing(serving)
        return serving


__all__ = ["TRACE_ID_HEADER", "ServingTracer", "install_serving_tracer", "otel_exporter_configured",
           "tracer_provider_from_env"]
