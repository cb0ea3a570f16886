"""Tracing on: one streamed realtime request is one trace whose spans come from the API, the
dispatcher and the worker, each hop the child of the one before it (service.store.tracing).
The dispatcher's route: the express path is off here (its trace, API to worker with no
dispatcher span between, is tests/integration/test_express_path.py's)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.cli.bootstrap import create_tenant_with_key
from service.store.settings import Settings
from tests.support.services import PATIENT_PLAN
from tests.support.spans import Span, by_trace, named, read_spans
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
# Each hop's span and the span it must descend from (its parent, or a Celery span between).
CHAIN = [
    ("fairway.api.door", "fairway-api"),
    ("fairway.api.insert", "fairway-api"),
    ("fairway.dispatcher.receive", "fairway-dispatcher"),
    ("fairway.dispatcher.decide", "fairway-dispatcher"),
    ("fairway.dispatcher.send", "fairway-dispatcher"),
    ("fairway.worker.receive", "fairway-worker"),
    ("fairway.worker.first_token", "fairway-worker"),
    ("fairway.worker.decode", "fairway-worker"),
    ("fairway.worker.finish", "fairway-worker"),
    ("fairway.api.relay", "fairway-api"),
]


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[Stack, Path]]:
    spans = Path(tempfile.mkdtemp(prefix="fairway-spans-"))
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
           "FAIRWAY_OTEL_SPANS_DIR": str(spans), "FAIRWAY_EXPRESS_TICKETS": "0"}
    try:
        with own_stack("tracing", env, workers=("trace-1",)) as stack:
            # Ready: the dispatcher leads (LISTENs), so the job is heard by its NOTIFY.
            wait_until(lambda: httpx.get(stack.base_url + "/readyz").status_code == 200, 60,
                       "ready", stack)
            yield stack, spans
    finally:
        shutil.rmtree(spans, ignore_errors=True)


def _whole(spans: list[Span]) -> bool:
    """Every span's parent is in: each process has exported its part of the trace."""
    ids = {s["span_id"] for s in spans}
    return all(s["parent_id"] is None or s["parent_id"] in ids for s in spans)


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    names = []
    while span.get("parent_id") in by_id:
        span = by_id[span["parent_id"]]
        names.append(span["name"])
    return names


def test_one_request_is_one_trace_across_every_process(traced: tuple[Stack, Path]) -> None:
    stack, directory = traced
    settings = Settings(database_url=stack.database_url, redis_url=stack.redis_url)
    _, key = create_tenant_with_key(settings, f"trace-{uuid.uuid4().hex[:6]}", plan=PATIENT_PLAN)
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "stream": True, "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": "trace me"}]},
            headers={"authorization": f"Bearer {key}"}) as resp:
        assert resp.status_code == 200
        assert "data: [DONE]" in list(resp.iter_lines())

    def complete() -> bool:  # the processes export in batches, every half second
        return any(_whole(t) and all(named(t, name) for name, _ in CHAIN)
                   for t in by_trace(read_spans(directory)).values())

    wait_until(complete, 20, "the request's spans", stack)
    traces = [t for t in by_trace(read_spans(directory)).values()
              if named(t, "fairway.api.relay") and named(t, "POST /v1/chat/completions")]
    assert len(traces) == 1
    spans = traces[0]
    by_id = {s["span_id"]: s for s in spans}
    root = [s for s in spans if s["parent_id"] is None]
    assert [s["service"] for s in root] == ["fairway-api"]  # the request's server span
    chain = []
    for name, service in CHAIN:
        span = named(spans, name)
        assert span is not None, f"{name} missing from {sorted({s['name'] for s in spans})}"
        assert span["service"] == service
        chain.append(span)
    # Each cross-process hop descends from the hop before it: the context crossed the NOTIFY,
    # the Celery message and the job's stream.
    for later, earlier in [("fairway.dispatcher.receive", "fairway.api.insert"),
                           ("fairway.dispatcher.send", "fairway.dispatcher.decide"),
                           ("fairway.worker.receive", "fairway.dispatcher.send"),
                           ("fairway.api.relay", "fairway.worker.first_token")]:
        assert earlier in _ancestors(named(spans, later), by_id), (later, earlier)
    # A span starts no earlier than its parent: each hop began after the one it continues.
    for span in spans:
        parent = by_id.get(span["parent_id"])
        assert parent is None or span["start_ns"] >= parent["start_ns"], span["name"]


def test_a_streamed_response_is_traced_to_its_relay(traced: tuple[Stack, Path]) -> None:
    """The Responses API's stream has the same hops: its relay continues the worker's span."""
    stack, directory = traced
    settings = Settings(database_url=stack.database_url, redis_url=stack.redis_url)
    _, key = create_tenant_with_key(settings, f"trace-{uuid.uuid4().hex[:6]}", plan=PATIENT_PLAN)
    with httpx.stream("POST", stack.base_url + "/v1/responses", timeout=60,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": MODEL, "input": "hi", "stream": True,
                            "max_output_tokens": 4}) as resp:
        assert resp.status_code == 200
        list(resp.iter_lines())

    def response_trace() -> list[Span] | None:
        for spans in by_trace(read_spans(directory)).values():
            root = [s for s in spans if s["parent_id"] is None]
            if (root and root[0]["name"].startswith("POST /v1/responses") and _whole(spans)
                    and named(spans, "fairway.api.relay")
                    and named(spans, "fairway.worker.finish")):
                return spans
        return None

    wait_until(lambda: response_trace() is not None, 20, "the response's spans", stack)
    spans = response_trace()
    assert spans is not None
    by_id = {s["span_id"]: s for s in spans}
    relay = named(spans, "fairway.api.relay")
    assert relay is not None
    assert "fairway.worker.first_token" in _ancestors(relay, by_id)
    assert "fairway.dispatcher.send" in _ancestors(relay, by_id)
