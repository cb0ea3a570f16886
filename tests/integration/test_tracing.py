"""Tracing on: one streamed realtime request is one trace whose spans come from the API, the
dispatcher and the worker, each hop the child of the one before it (service.store.tracing)."""

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
from tests.support.services import PATIENT_TIER
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
           "FAIRWAY_OTEL_SPANS_DIR": str(spans)}
    try:
        with own_stack("tracing", env, workers=("trace-1",)) as stack:
            # Ready: the dispatcher leads (LISTENs), so the job is heard by its NOTIFY.
            wait_until(lambda: httpx.get(stack.base_url + "/readyz").status_code == 200, 60,
                       "ready", stack)
            yield stack, spans
    finally:
        shutil.rmtree(spans, ignore_errors=True)


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    names = []
    while span.get("parent_id") in by_id:
        span = by_id[span["parent_id"]]
        names.append(span["name"])
    return names


def test_one_request_is_one_trace_across_every_process(traced: tuple[Stack, Path]) -> None:
    stack, directory = traced
    settings = Settings(database_url=stack.database_url, redis_url=stack.redis_url)
    _, key = create_tenant_with_key(settings, f"trace-{uuid.uuid4().hex[:6]}", tier=PATIENT_TIER)
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "stream": True, "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": "trace me"}]},
            headers={"authorization": f"Bearer {key}"}) as resp:
        assert resp.status_code == 200
        assert "data: [DONE]" in list(resp.iter_lines())

    def complete() -> bool:  # the processes export in batches, every half second
        return any(named(t, "fairway.api.relay") and named(t, "fairway.worker.finish")
                   for t in by_trace(read_spans(directory)).values())

    wait_until(complete, 20, "the request's spans", stack)
    traces = [t for t in by_trace(read_spans(directory)).values()
              if named(t, "fairway.api.relay")]
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
    # And the hops follow one another in time, as the job went.
    ends = [s["end_ns"] for s in chain if s["name"] not in ("fairway.worker.decode",
                                                             "fairway.worker.finish")]
    assert ends == sorted(ends)
