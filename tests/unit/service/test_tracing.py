"""Trace context crosses every hop's carrier (W3C headers, the NOTIFY payload, a stream entry)
and comes back as the same trace and parent; with tracing off every helper is inert."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service.store import job_stream, tracing, wakeups
from service.store.settings import Settings, TracingSettings, env_var
from tests.support.tracing import spans_fixture  # noqa: F401 (the `spans` fixture)


def _ids(span: trace.Span) -> tuple[int, int]:
    ctx = span.get_span_context()
    return ctx.trace_id, ctx.span_id


def test_off_everything_is_inert() -> None:
    assert not tracing.enabled()
    with tracing.span("x") as current:
        assert current is None
        assert tracing.inject() == {} and tracing.traceparent() is None
    assert tracing.start_span("y") is None
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.extract({"traceparent": tp}) is None
    assert tracing.extract_traceparent(tp) is None


def test_headers_round_trip_to_a_child_of_the_sender(spans: InMemorySpanExporter) -> None:
    with tracing.span("sender") as sender:
        assert sender is not None
        headers = tracing.inject()
    assert set(headers) >= {"traceparent"}
    with tracing.span("receiver", parent=tracing.extract(headers)):
        pass
    sent, received = spans.get_finished_spans()
    assert received.context.trace_id == sent.context.trace_id
    assert received.parent is not None and received.parent.span_id == sent.context.span_id


def test_the_notify_payload_and_the_stream_carry_the_context(
        spans: InMemorySpanExporter) -> None:
    with tracing.span("insert") as insert:
        payload = wakeups.encode(wakeups.JobQueued(uuid.uuid4(), tracing.traceparent()))
    heard = wakeups.decode(payload)
    assert isinstance(heard, wakeups.JobQueued)
    first = tracing.start_span("first_token", parent=tracing.extract_traceparent(
        heard.traceparent))
    raw = job_stream.fields(job_stream.Delta(1, "hi", 1, 0, tracing.traceparent(first)))
    tracing.end(first)
    entry = job_stream.parse({str(k): str(v) for k, v in raw.items()})
    assert isinstance(entry, job_stream.Delta)
    with tracing.span("relay", parent=tracing.extract_traceparent(entry.traceparent)) as relay:
        assert relay is not None and insert is not None
        assert _ids(relay)[0] == _ids(insert)[0]
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert by_name["first_token"].parent.span_id == _ids(insert)[1]  # type: ignore[union-attr]
    assert by_name["relay"].parent.span_id == by_name["first_token"].context.span_id  # type: ignore[union-attr]


@pytest.mark.parametrize("headers", [None, {}, {"traceparent": "junk"},
                                     {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
                                     {"tracestate": "a=b"}])
def test_unreadable_headers_give_no_parent(spans: InMemorySpanExporter,
                                           headers: dict[str, str] | None) -> None:
    assert tracing.extract(headers) is None


def test_traced_spans_a_coroutine_and_keeps_its_result(spans: InMemorySpanExporter) -> None:
    import asyncio

    @tracing.traced("hop")
    async def hop(x: int) -> int:
        return x + 1

    assert asyncio.run(hop(1)) == 2
    assert [s.name for s in spans.get_finished_spans()] == ["hop"]


def test_settings_switch_it_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FAIRWAY_OTEL_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert not Settings().tracing.on
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert Settings().tracing.endpoint == "http://collector:4318"
    monkeypatch.setenv("FAIRWAY_OTEL_ENDPOINT", "http://jaeger:4318")
    assert Settings().tracing.endpoint == "http://jaeger:4318"  # ours wins
    assert TracingSettings(spans_dir=tmp_path).on
    assert env_var(TracingSettings, "endpoint") == "FAIRWAY_OTEL_ENDPOINT"
    assert tracing.otlp_traces_url("http://jaeger:4318/") == "http://jaeger:4318/v1/traces"
    assert tracing.otlp_traces_url("http://c/v1/traces") == "http://c/v1/traces"


def test_spans_reach_an_otlp_http_collector_and_the_files(tmp_path: Path) -> None:
    """The exporters ``build_provider`` sets up from the settings deliver: a stand-in collector
    receives an OTLP/HTTP POST on /v1/traces, and the spans directory gets a JSON line."""
    received: list[tuple[str, str, int]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers["Content-Length"])
            received.append((self.path, self.headers["Content-Type"], len(self.rfile.read(size))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        provider = tracing.build_provider(TracingSettings(
            endpoint=f"http://127.0.0.1:{server.server_port}", spans_dir=tmp_path), "test-svc")
        assert provider is not None
        with provider.get_tracer("t").start_as_current_span("hop"):
            pass
        assert provider.force_flush(10_000)
        provider.shutdown()
    finally:
        server.shutdown()
    assert len(received) == 1
    path, content_type, size = received[0]
    assert path == "/v1/traces" and content_type == "application/x-protobuf" and size > 0
    [line] = [ln for f in tmp_path.glob("test-svc-*.jsonl") for ln in f.read_text().splitlines()]
    record = json.loads(line)
    assert record["name"] == "hop" and record["service"] == "test-svc"
    assert tracing.build_provider(TracingSettings(endpoint="", spans_dir=None), "x") is None
