"""OpenTelemetry tracing for every process: one span per hop of a job (docs/observability.md).

Off unless configured (``settings.tracing``): no provider is installed, the API's default
tracer is a no-op, and every helper here returns at its first line, so an untraced process
pays one attribute read per hop. On, spans go to an OTLP/HTTP collector (Jaeger, ...) and/or
to JSON-lines files in ``tracing.spans_dir`` (what bench/hop_latency.py and the tests read).

Context crosses process boundaries as W3C trace-context headers: ``inject()`` gives the
current span's as a dict, ``extract(headers)`` gives a parent back. The NOTIFY payload and a
job stream's first entry carry just the ``traceparent`` string (``traceparent()``,
``extract_traceparent``); a Celery task message carries ``inject()``'s dict as its headers,
which the worker's Celery instrumentation continues.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import wraps
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service.store.settings import TracingSettings

log = logging.getLogger("fairway.tracing")
TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None  # set by configure(): None means tracing is off
_OFF: AbstractContextManager[None] = nullcontext()  # every span while off (reusable)

P = ParamSpec("P")
T = TypeVar("T")


def enabled() -> bool:
    return _tracer is not None


def configure(settings: TracingSettings, service: str) -> bool:
    """Install this process's tracer provider when tracing is configured; False, and nothing
    installed, when it is off. Call once per process, before the first span."""
    global _tracer
    if _tracer is not None:  # once per process (a test may build several apps)
        return True
    provider = build_provider(settings, service)
    if provider is None:
        return False
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flush what is buffered when the process ends
    _tracer = provider.get_tracer("fairway")
    return True


def build_provider(settings: TracingSettings, service: str) -> TracerProvider | None:
    """The tracer provider ``settings`` ask for (batches to each exporter), or None when off."""
    if not settings.on:
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    exporters: list[SpanExporter] = []
    if settings.endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter(endpoint=otlp_traces_url(settings.endpoint)))
    if settings.spans_dir is not None:
        exporters.append(JsonLinesExporter(settings.spans_dir, service))
    for each in exporters:
        provider.add_span_processor(BatchSpanProcessor(each, schedule_delay_millis=500))
    log.info("tracing on: %s", ", ".join(type(e).__name__ for e in exporters))
    return provider


def instrument_celery() -> None:
    """Celery's instrumentation, for the worker: its task span continues the context in the
    message's headers. A no-op while tracing is off."""
    if _tracer is None:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


def otlp_traces_url(endpoint: str) -> str:
    """OTLP/HTTP's traces path on a collector's base URL (as OTEL_EXPORTER_OTLP_ENDPOINT is)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


# -- propagation --------------------------------------------------------------------------------
def inject(ctx: Context | None = None) -> dict[str, str]:
    """The W3C headers (``traceparent``, ``tracestate``) of ``ctx`` (default: the current
    context); {} when tracing is off or nothing is being traced."""
    if _tracer is None:
        return {}
    headers: dict[str, str] = {}
    _PROPAGATOR.inject(headers, context=ctx)
    return headers


def extract(headers: Mapping[str, str] | None) -> Context | None:
    """The parent context ``headers`` carry, or None (tracing off, no or unreadable headers)."""
    if _tracer is None or not headers or TRACEPARENT not in headers:
        return None
    ctx = _PROPAGATOR.extract(dict(headers))
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


@contextmanager
def continued(headers: Mapping[str, str] | None) -> Iterator[None]:
    """The block runs in the trace ``headers`` carry (current context; unchanged without)."""
    parent = extract(headers)
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


def traceparent(span: Span | None = None) -> str | None:
    """``span``'s (default: the current span's) ``traceparent``, or None when not traced."""
    if _tracer is None:
        return None
    ctx = trace.set_span_in_context(span) if span is not None else None
    return inject(ctx).get(TRACEPARENT)


def extract_traceparent(value: str | None) -> Context | None:
    return extract({TRACEPARENT: value}) if value else None


# -- spans ----------------------------------------------------------------------------------------
def span(name: str, *, parent: Context | None = None, start_ns: int | None = None,
         attributes: Mapping[str, str | int | float] | None = None
         ) -> AbstractContextManager[Span | None]:
    """A span around the block, current inside it (while off: None, and nothing done)."""
    if _tracer is None:
        return _OFF
    return _tracer.start_as_current_span(name, context=parent, start_time=start_ns,
                                         attributes=attributes)


def start_span(name: str, *, parent: Context | None = None, start_ns: int | None = None,
               attributes: Mapping[str, str | int | float] | None = None) -> Span | None:
    """A span that the caller ends (``end``), not made current: for hops that do not fit a
    block (an async generator's first item). None when off."""
    if _tracer is None:
        return None
    return _tracer.start_span(name, context=parent, start_time=start_ns, attributes=attributes)


def end(span_: Span | None, end_ns: int | None = None) -> None:
    if span_ is not None:
        span_.end(end_time=end_ns)


def context_of(span_: Span | None) -> Context | None:
    return trace.set_span_in_context(span_) if span_ is not None else None


def traced(name: str) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Decorate an async function with a span of its whole call."""
    def wrap(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            if _tracer is None:
                return await fn(*args, **kwargs)
            with _tracer.start_as_current_span(name):
                return await fn(*args, **kwargs)
        return call
    return wrap


# -- the file exporter ---------------------------------------------------------------------------
class JsonLinesExporter(SpanExporter):
    """Spans as JSON lines in ``<dir>/<service>-<pid>.jsonl`` (one file per process, so
    processes never interleave): what the hop bench and the tests read, no collector needed."""

    def __init__(self, directory: Path, service: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{service}-{os.getpid()}.jsonl"
        self._file: IO[str] | None = None

    def export(self, spans: Any) -> SpanExportResult:
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._file.writelines(span_record(s) + "\n" for s in spans)
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def span_record(s: ReadableSpan) -> str:
    ctx = s.context
    parent = s.parent
    return json.dumps({
        "name": s.name, "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
        "span_id": f"{ctx.span_id:016x}" if ctx else None,
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "service": s.resource.attributes.get("service.name"),
        "start_ns": s.start_time, "end_ns": s.end_time,
        "attributes": dict(s.attributes or {})}, default=str)
