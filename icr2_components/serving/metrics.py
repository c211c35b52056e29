"""Prometheus metrics of ``icr2 serve``, served as Prometheus text at ``GET /metrics``.

Each app has its own ``prometheus_client.CollectorRegistry`` (never the process-global one, so two apps in one
process, as in tests, count apart). What is counted (every name starts ``icr2_serve_``):

* ``requests_total{pipeline, route, status}`` and ``request_seconds{pipeline, route}`` (a histogram): every HTTP
  request, rejections included; ``route`` is the served path (``other`` for a path that is not served, so a
  scanner cannot grow the label set); ``pipeline`` is the pipeline that answered (empty when none ran);
* ``rejections_total{status, reason}``: 401 ``unauthorized``, 403 ``forbidden``, 408 ``body_timeout``, 413
  ``too_large``, 429 ``busy_or_rate_limited``, 504 ``run_timeout``;
* ``component_seconds{pipeline, component, type}``: each component run (from Haystack's tracing hooks);
* ``tokens_total{pipeline, kind}``: prompt and completion tokens of the readers' replies;
* ``requests_in_flight`` and ``queue_depth`` (requests admitted to a pipeline route and not yet running);
* the techniques' own signals: ``gate_decisions_total{pipeline, component, decision}`` (``retrieve`` or
  ``no_retrieval``) and ``gate_p_yes{pipeline, component}`` (the gate's score, a histogram) from
  ``TimeAwareRetrievalGate``'s ``decision``; ``rap_passages_kept`` and ``rap_passages_in`` (histograms) from
  ``RetrievalAttentionFilter``'s ``report``; ``corpus_budget_used_ratio`` and ``corpus_budget_used{unit}`` from
  ``ConfounderAwareCorpusBuilder``'s ``report``.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from icr2_components.serving.observation import Observation

METRICS_PATH = "/metrics"
PREFIX = "icr2_serve"
REJECTION_REASONS = {401: "unauthorized", 403: "forbidden", 408: "body_timeout", 413: "too_large",
                     429: "busy_or_rate_limited", 504: "run_timeout"}
# a CPU reader answers in seconds to minutes; a served backend in tens of milliseconds
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
COUNT_BUCKETS = (0, 1, 2, 3, 4, 5, 8, 10, 15, 20, 30, 50, 100)
RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


class ServingMetrics:
    """The metrics of one app, in their own registry; ``render()`` is the ``/metrics`` body."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests answered, by pipeline, route and status",
                                ("pipeline", "route", "status"), registry=r)
        self.latency = Histogram(f"{PREFIX}_request_seconds", "seconds from the request's arrival to the end of "
                                 "its answer", ("pipeline", "route"), buckets=LATENCY_BUCKETS, registry=r)
        self.rejections = Counter(f"{PREFIX}_rejections", "requests refused before or instead of a run",
                                  ("status", "reason"), registry=r)
        self.component_latency = Histogram(f"{PREFIX}_component_seconds", "seconds of one component run",
                                           ("pipeline", "component", "type"), buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter(f"{PREFIX}_tokens", "tokens of the readers' replies", ("pipeline", "kind"), registry=r)
        self.in_flight = Gauge(f"{PREFIX}_requests_in_flight", "requests being answered now", registry=r)
        self.queue_depth = Gauge(f"{PREFIX}_queue_depth", "requests admitted to a pipeline route and waiting for "
                                 "their run to start", registry=r)
        self.gate_decisions = Counter(f"{PREFIX}_gate_decisions", "the retrieval gate's decisions",
                                      ("pipeline", "component", "decision"), registry=r)
        self.gate_score = Histogram(f"{PREFIX}_gate_p_yes", "the retrieval gate's score (its p_yes) per decision",
                                    ("pipeline", "component"), buckets=RATIO_BUCKETS, registry=r)
        self.rap_kept = Histogram(f"{PREFIX}_rap_passages_kept", "passages RetrievalAttentionFilter kept per run",
                                  ("pipeline", "component"), buckets=COUNT_BUCKETS, registry=r)
        self.rap_in = Histogram(f"{PREFIX}_rap_passages_in", "passages RetrievalAttentionFilter was given per run",
                                ("pipeline", "component"), buckets=COUNT_BUCKETS, registry=r)
        self.budget_ratio = Histogram(f"{PREFIX}_corpus_budget_used_ratio", "share of its budget the corpus builder "
                                      "filled per run", ("pipeline", "component"), buckets=RATIO_BUCKETS, registry=r)
        self.budget_used = Counter(f"{PREFIX}_corpus_budget_used", "budget the corpus builder filled, in its unit",
                                   ("pipeline", "component", "unit"), registry=r)
        self._lock = threading.Lock()
        self._work_in_flight = 0
        self._running = 0

    def render(self) -> bytes:
        """The registry as Prometheus text (the exposition format 0.0.4)."""
        return generate_latest(self.registry)

    def work_admitted(self, delta: int) -> None:
        """A request on a pipeline route entered (+1) or left (-1)."""
        with self._lock:
            self._work_in_flight += delta
            self.queue_depth.set(max(0, self._work_in_flight - self._running))

    def run_started(self, delta: int) -> None:
        """A pipeline run started (+1) or ended (-1)."""
        with self._lock:
            self._running += delta
            self.queue_depth.set(max(0, self._work_in_flight - self._running))

    def component_ran(self, pipeline: str, component: str, kind: str, seconds: float,
                      signals: dict[str, Any]) -> None:
        """One component run: its seconds and the technique signals read from its outputs (``technique_signals``)."""
        self.component_latency.labels(pipeline, component, kind).observe(seconds)
        if "gate.retrieve" in signals:
            decision = "retrieve" if signals["gate.retrieve"] else "no_retrieval"
            self.gate_decisions.labels(pipeline, component, decision).inc()
            if isinstance(signals.get("gate.p_yes"), float):
                self.gate_score.labels(pipeline, component).observe(signals["gate.p_yes"])
        if "rap.passages_out" in signals:
            self.rap_kept.labels(pipeline, component).observe(signals["rap.passages_out"])
            self.rap_in.labels(pipeline, component).observe(signals.get("rap.passages_in", 0))
        if "corpus.budget_used" in signals:
            unit = str(signals.get("corpus.budget_unit", ""))
            self.budget_used.labels(pipeline, component, unit).inc(signals["corpus.budget_used"])
            if signals.get("corpus.budget"):
                self.budget_ratio.labels(pipeline, component).observe(
                    signals["corpus.budget_used"] / signals["corpus.budget"])

    def request_done(self, observation: Observation) -> None:
        """The request's counters, once its answer has been sent."""
        pipeline = observation.pipeline or ""
        status = observation.status or 0
        self.requests.labels(pipeline, observation.route, str(status)).inc()
        self.latency.labels(pipeline, observation.route).observe(observation.latency_s or 0.0)
        if status in REJECTION_REASONS:
            self.rejections.labels(str(status), REJECTION_REASONS[status]).inc()
        if observation.prompt_tokens:
            self.tokens.labels(pipeline, "prompt").inc(observation.prompt_tokens)
        if observation.completion_tokens:
            self.tokens.labels(pipeline, "completion").inc(observation.completion_tokens)


def technique_signals(outputs: Any) -> dict[str, Any]:
    """The techniques' signals in a component's outputs (empty for any other component): the gate's ``decision``
    (``retrieve``, ``p_yes``, ``method``), RAP's ``report`` (passages in and out), the corpus builder's ``report``
    (budget, used, unit, passages). Keys are span attribute names without the ``icr2.`` prefix."""
    if not isinstance(outputs, dict):
        return {}
    signals: dict[str, Any] = {}
    decision = outputs.get("decision")
    if isinstance(decision, dict) and "retrieve" in decision:
        signals["gate.retrieve"] = bool(decision["retrieve"])
        if isinstance(decision.get("p_yes"), int | float) and not isinstance(decision.get("p_yes"), bool):
            signals["gate.p_yes"] = float(decision["p_yes"])
        if decision.get("method"):
            signals["gate.method"] = str(decision["method"])
    report = outputs.get("report")
    if isinstance(report, dict):
        if "passages_out" in report and "passages_in" in report:  # RetrievalAttentionFilter
            signals["rap.passages_in"] = int(report["passages_in"])
            signals["rap.passages_out"] = int(report["passages_out"])
        if "used" in report and "budget" in report:  # ConfounderAwareCorpusBuilder
            if isinstance(report["used"], int | float):
                signals["corpus.budget_used"] = report["used"]
            if isinstance(report["budget"], int | float):
                signals["corpus.budget"] = report["budget"]
            signals["corpus.budget_unit"] = str(report.get("budget_unit", ""))
            if isinstance(report.get("passages"), int):
                signals["corpus.passages"] = report["passages"]
    return signals


__all__ = ["METRICS_PATH", "ServingMetrics", "technique_signals"]
