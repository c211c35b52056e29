"""Metrics, traces and request logs of ``icr2 serve`` on real requests: ``adaptive_rag`` (the retrieval gate) and
``rap`` (RetrievalAttentionFilter, the corpus builder) served in one app with real SmolLM2 and the bundled KILT
sample index, behind an API key. ``/metrics`` is scraped with prometheus_client's own parser after the requests;
the trace is read from the OpenTelemetry SDK's in-memory exporter. In-process: the real app through Starlette's
test client (its middleware, guards and routes are the server's)."""

import json
import os
from collections import defaultdict

import pytest
from fastapi.testclient import TestClient

from icr2_components.serving import create_serving_app
from icr2_components.serving.auth import KeyStore
from icr2_components.serving.metrics import ServingMetrics, technique_signals
from icr2_components.serving.observability import Observability
from icr2_components.serving.request_log import RequestLog

QUESTION = "Who wrote Hamlet?"
KEY = "sk-observability-test-key-0123456789"
KEY_ENV = "ICR2_TEST_OBSERVABILITY_KEYS"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app, its in-memory span exporter and request log, after the module's real requests (their answers)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    os.environ[KEY_ENV] = KEY
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    log_path = tmp_path_factory.mktemp("log") / "requests.jsonl"
    observability = Observability(metrics=ServingMetrics(), tracer_provider=provider,
                                  request_log=RequestLog(str(log_path)))
    app = create_serving_app(["adaptive_rag", "rap"], max_new_tokens=2, api_keys=KeyStore(None, KEY_ENV),
                             observability=observability)
    answers = {}
    try:
        with TestClient(app) as http:
            answers["unauthorized"] = http.post("/adaptive_rag/run", json={"query": QUESTION})
            answers["traced"] = http.post("/adaptive_rag/run", json={"query": QUESTION}, headers={
                **AUTH, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "x-request-id": "traced-request-1"})
            answers["streamed"] = http.post("/v1/chat/completions", headers=AUTH, json={
                "model": "adaptive_rag", "stream": True, "messages": [{"role": "user", "content": QUESTION}]})
            answers["rap"] = http.post("/v1/chat/completions", headers=AUTH, json={
                "model": "rap", "messages": [{"role": "user", "content": QUESTION}]})
            answers["metrics_without_key"] = http.get("/metrics")
            answers["metrics"] = http.get("/metrics", headers=AUTH)
    finally:
        os.environ.pop(KEY_ENV, None)
    observability.close()
    return answers, exporter.get_finished_spans(), log_path


def samples(text: str) -> dict[str, list]:
    from prometheus_client.parser import text_string_to_metric_families

    found = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name].append(sample)
    return found


def total(found, name: str, **labels) -> float:
    return sum(s.value for s in found[name] if all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_count_the_real_requests_and_the_techniques_signals(served):
    answers, _, _ = served
    for name in ("traced", "streamed", "rap"):
        assert answers[name].status_code == 200, answers[name].text
    assert answers["unauthorized"].status_code == 401
    assert answers["metrics_without_key"].status_code == 401  # the scrape needs the key like every route
    assert answers["metrics"].status_code == 200
    assert answers["metrics"].headers["content-type"].startswith("text/plain")
    found = samples(answers["metrics"].text)
    # the three answered requests, by pipeline and route; the 401 counted and a rejection
    assert total(found, "icr2_serve_requests_total", status="200", route="/adaptive_rag/run") == 1
    assert total(found, "icr2_serve_requests_total", status="200", route="/v1/chat/completions") == 2
    assert total(found, "icr2_serve_requests_total", pipeline="adaptive_rag", status="200") == 2
    assert total(found, "icr2_serve_requests_total", pipeline="rap", status="200") == 1
    assert total(found, "icr2_serve_requests_total", status="401") == 2  # the run and the keyless scrape
    assert total(found, "icr2_serve_rejections_total", status="401", reason="unauthorized") == 2
    assert total(found, "icr2_serve_request_seconds_count", pipeline="adaptive_rag") == 2
    # the gate decided twice (one per adaptive_rag request), with its score; RAP ran once
    assert total(found, "icr2_serve_gate_decisions_total", pipeline="adaptive_rag") == 2
    assert total(found, "icr2_serve_gate_p_yes_count", pipeline="adaptive_rag") == 2
    assert total(found, "icr2_serve_rap_passages_kept_count", pipeline="rap") == 1
    kept = total(found, "icr2_serve_rap_passages_kept_sum", pipeline="rap")
    given = total(found, "icr2_serve_rap_passages_in_sum", pipeline="rap")
    assert 0 < kept <= given
    assert total(found, "icr2_serve_corpus_budget_used_total", pipeline="rap") > 0
    assert total(found, "icr2_serve_component_seconds_count", pipeline="rap", component="rap_filter") == 1
    assert total(found, "icr2_serve_component_seconds_count", pipeline="adaptive_rag", component="gate") == 2
    # tokens: the rap answer's usage is what was counted for rap
    usage = answers["rap"].json()["usage"]
    assert total(found, "icr2_serve_tokens_total", pipeline="rap", kind="prompt") == usage["prompt_tokens"]
    assert total(found, "icr2_serve_tokens_total", pipeline="rap", kind="completion") == usage["completion_tokens"]
    assert total(found, "icr2_serve_queue_depth") == 0


def test_a_trace_continues_the_callers_traceparent_with_a_span_per_component(served):
    answers, spans, _ = served
    traced = answers["traced"]
    assert traced.headers["x-trace-id"] == CALLER_TRACE
    mine = [s for s in spans if format(s.context.trace_id, "032x") == CALLER_TRACE]
    request = [s for s in mine if s.name == "icr2.serve.request"]
    assert len(request) == 1 and format(request[0].parent.span_id, "016x") == CALLER_SPAN
    assert request[0].attributes["icr2.request_id"] == "traced-request-1"
    assert request[0].attributes["http.response.status_code"] == 200
    run = [s for s in mine if s.name == "haystack.pipeline.run"]
    assert len(run) == 1 and run[0].parent.span_id == request[0].context.span_id
    components = {s.attributes["haystack.component.name"]: s for s in mine if s.name == "haystack.component.run"}
    assert all(s.parent.span_id == run[0].context.span_id for s in components.values())
    # the gate, then one branch: retrieval (retriever, prompt, reader) or not (the closed-book reader)
    gate = components["gate"]
    assert isinstance(gate.attributes["icr2.gate.retrieve"], bool)
    assert 0.0 <= gate.attributes["icr2.gate.p_yes"] <= 1.0
    branch = {"retriever", "context_prompt", "rag_reader"} if gate.attributes["icr2.gate.retrieve"] else {
        "closed_book_reader"}
    assert {"gate", "answer"} | branch <= set(components), set(components)
    # content tracing is off by default: no prompt, document or answer on any span
    for span in mine:
        assert not any(key.endswith((".input", ".output")) for key in span.attributes), span.attributes
    # RAP's trace (the non-streamed chat) carries what RAP kept and the budget the corpus builder used
    rap_trace = answers["rap"].headers["x-trace-id"]
    rap_spans = {s.attributes.get("haystack.component.name"): s for s in spans
                 if format(s.context.trace_id, "032x") == rap_trace and s.name == "haystack.component.run"}
    assert 0 < rap_spans["rap_filter"].attributes["icr2.rap.passages_out"] <= (
        rap_spans["rap_filter"].attributes["icr2.rap.passages_in"])
    assert rap_spans["corpus"].attributes["icr2.corpus.budget_used"] > 0
    # the streamed answer ran in its own thread: its spans are still under its request's trace
    streamed_trace = answers["streamed"].headers["x-trace-id"]
    assert any(s.name == "haystack.pipeline.run" for s in spans if format(s.context.trace_id, "032x") ==
               streamed_trace)


def test_one_json_line_per_request_without_the_key_or_the_content(served):
    answers, _, log_path = served
    text = log_path.read_text()
    assert KEY not in text and QUESTION not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == len(answers)
    traced = next(line for line in lines if line["request_id"] == "traced-request-1")
    assert traced["pipeline"] == "adaptive_rag" and traced["status"] == 200 and traced["latency_ms"] > 0
    assert traced["trace_id"] == CALLER_TRACE and traced["prompt_tokens"] > 0 and traced["completion_tokens"] > 0
    assert "gate" in traced["components_ms"]
    assert sorted(line["status"] for line in lines) == [200, 200, 200, 200, 401, 401]


@pytest.mark.unit
def test_technique_signals_are_read_from_the_components_outputs():
    gate = technique_signals({"retrieve": "q", "decision": {"retrieve": True, "p_yes": 0.8, "method": "threshold"}})
    assert gate == {"gate.retrieve": True, "gate.p_yes": 0.8, "gate.method": "threshold"}
    rap = technique_signals({"documents": [], "report": {"passages_in": 8, "passages_out": 3, "top_m": 3}})
    assert rap == {"rap.passages_in": 8, "rap.passages_out": 3}
    corpus = technique_signals({"report": {"budget": 4000, "used": 3100, "budget_unit": "tokens", "passages": 9}})
    assert corpus == {"corpus.budget_used": 3100, "corpus.budget": 4000, "corpus.budget_unit": "tokens",
                      "corpus.passages": 9}
    assert technique_signals({"replies": ["x"]}) == {}


@pytest.mark.unit
def test_traces_are_exported_where_the_otel_variables_say():
    from icr2_components.errors import UserInputError
    from icr2_components.serving.tracing import otel_exporter_configured, tracer_provider_from_env

    assert not otel_exporter_configured({}) and not otel_exporter_configured({"OTEL_TRACES_EXPORTER": "none"})
    assert otel_exporter_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert otel_exporter_configured({"OTEL_TRACES_EXPORTER": "console"})
    with pytest.raises(UserInputError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        tracer_provider_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    provider = tracer_provider_from_env({"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "rag"})
    assert provider.resource.attributes["service.name"] == "rag"
    provider.shutdown()
