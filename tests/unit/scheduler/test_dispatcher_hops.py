"""The dispatcher's hops of a traced job: receive (a child of the API's insert), decide, send
(its W3C headers handed out for the job's message); untraced jobs leave nothing."""

from __future__ import annotations

import itertools
import time
import uuid

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scheduler.dispatcher.hops import DECIDE, RECEIVE, SEND, HopTraces
from scheduler.types import Assign
from service.store import tracing
from tests.support.tracing import spans_fixture  # noqa: F401 (the `spans` fixture)


def test_a_notified_job_gets_receive_decide_send(spans: InMemorySpanExporter) -> None:
    job = uuid.uuid4()
    with tracing.span("insert"):
        traceparent = tracing.traceparent()
    hops = HopTraces()
    hops.heard(job, traceparent, time.time_ns())
    hops.arrived()
    with hops.sending([Assign(str(job), "w-1")]) as traces:
        headers = traces[str(job)]  # what the hand-off or Celery message carries
    by_name = {s.name: s for s in spans.get_finished_spans()}
    chain = [by_name[n] for n in ("insert", RECEIVE, DECIDE, SEND)]
    for parent, child in itertools.pairwise(chain):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
        assert child.context.trace_id == parent.context.trace_id
    assert headers["traceparent"].split("-")[2] == f"{by_name[SEND].context.span_id:016x}"
    with hops.sending([Assign(str(job), "w-1")]) as traces:  # followed once: no second hop
        assert traces == {}
    assert len(spans.get_finished_spans()) == 4


def test_untraced_and_forgotten_jobs_leave_nothing(spans: InMemorySpanExporter) -> None:
    hops = HopTraces()
    untraced, refused = uuid.uuid4(), uuid.uuid4()
    with tracing.span("insert"):
        traceparent = tracing.traceparent()
    hops.heard(untraced, None, time.time_ns())
    hops.heard(refused, traceparent, time.time_ns())
    hops.arrived()
    hops.forget(str(refused))
    with hops.sending([Assign(str(job), "w-1") for job in (untraced, refused)]) as traces:
        assert traces == {}
    assert [s.name for s in spans.get_finished_spans()] == ["insert", RECEIVE]
