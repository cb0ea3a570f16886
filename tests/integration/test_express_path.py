"""The express path (service.jobs.express_handoff, scheduler.dispatcher.express_lender) on a real
stack: the dispatcher lends tickets, the API places a realtime job on its worker at insert and
hands it off itself, so it runs while the dispatcher is frozen; lent tickets expire with a
dispatcher that stopped; a job placed on a worker the policy does not have is queued again and runs
elsewhere. (A hand-off Redis refuses places nothing: tests/integration/test_door_hand_off.py.)"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from redis import Redis
from sqlalchemy import select

from service.cli.bootstrap import create_tenant_with_key
from service.jobs.express_handoff import decode_ticket
from service.store import handoff
from service.store.db import sync_session
from service.store.keys import express_key, handoff_stream
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.conftest import SIM_ENV
from tests.support.services import PATIENT_PLAN
from tests.support.spans import Span, by_trace, named, read_spans
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"


SPANS = Path(tempfile.mkdtemp(prefix="fairway-express-spans-"))


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    try:
        with own_stack("express", {**SIM_ENV, "FAIRWAY_OTEL_SPANS_DIR": str(SPANS)},
                       workers=("ex-a",)) as s:
            yield s
    finally:
        shutil.rmtree(SPANS, ignore_errors=True)


def _api(stack: Stack) -> openai.OpenAI:
    _, key = create_tenant_with_key(Settings(database_url=stack.database_url),
                                    f"ex-{uuid.uuid4().hex[:8]}", plan=PATIENT_PLAN)
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=60)


def _job(stack: Stack, job_id: str) -> Job:
    with sync_session(stack.database_url) as session:
        job = session.scalar(select(Job).where(Job.id == uuid.UUID(job_id)))
        assert job is not None
        return job


def _ask(api: openai.OpenAI, text: str) -> Any:
    return api.chat.completions.create(model=MODEL, max_tokens=3,
                                       messages=[{"role": "user", "content": text}])


def _signal_dispatcher(stack: Stack, sig: int) -> None:
    os.killpg(stack.procs["scheduler"].popen.pid, sig)


def _tickets(stack: Stack) -> list[str]:
    return [raw.decode() for raw in Redis.from_url(stack.redis_url).lrange(express_key(MODEL),
                                                                          0, -1)]


def test_a_realtime_job_runs_while_the_dispatcher_is_frozen(stack: Stack) -> None:
    api = _api(stack)
    wait_until(lambda: _tickets(stack), 20, "express tickets lent", stack)
    assert all(decode_ticket(t) is not None and t.startswith("ex-a|") for t in _tickets(stack))
    _signal_dispatcher(stack, signal.SIGSTOP)
    try:
        resp = _ask(api, "no dispatcher on my path")  # within the tickets' life (3 s)
        job = _job(stack, resp.id.split("-", 1)[1])
        assert (job.status, job.attempt, job.worker_id) == ("succeeded", 1, "ex-a")
        assert job.assigned_at is not None and job.started_at is not None
        assert job.created_at <= job.assigned_at <= job.started_at  # placed at insert
        assert resp.usage is not None and resp.usage.completion_tokens == 3
        # Its hand-off is the API's: one entry, with the body to start the engine early.
        entries = [handoff.decode(f) for _, f in
                   Redis.from_url(stack.redis_url).xrange(handoff_stream("ex-a"))]
        mine = [e for e in entries if e is not None and e.job_id == str(job.id)]
        assert len(mine) == 1 and mine[0].attempt == 1 and mine[0].body is not None
    finally:
        _signal_dispatcher(stack, signal.SIGCONT)


def _trace_of(job_id: str) -> list[Span] | None:
    """The trace whose hand-off span names ``job_id``, once every span in it has its
    parent and the relay's and the worker's claim spans are in (the claim may end after the
    relay: it waits for the first token, worker.claim_ahead)."""
    for spans in by_trace(read_spans(SPANS)).values():
        ids = {s["span_id"] for s in spans}
        whole = all(s["parent_id"] is None or s["parent_id"] in ids for s in spans)
        handoff_span = named(spans, "fairway.api.handoff")
        if (whole and named(spans, "fairway.api.relay") and handoff_span is not None
                and named(spans, "fairway.worker.receive")
                and handoff_span["attributes"].get("fairway.job_id") == job_id):
            return spans
    return None


def test_an_express_job_is_one_trace_from_the_api_to_its_worker(stack: Stack) -> None:
    api = _api(stack)
    wait_until(lambda: _tickets(stack), 20, "express tickets lent", stack)
    with api.chat.completions.create(model=MODEL, max_tokens=3, stream=True, messages=[
            {"role": "user", "content": "trace the express path"}]) as stream:
        job_id = next(iter(stream)).id.split("-", 1)[1]
        list(stream)
    assert _job(stack, job_id).assigned_at == _job(stack, job_id).created_at  # placed at insert
    job_uuid = str(uuid.UUID(job_id))
    wait_until(lambda: _trace_of(job_uuid) is not None, 20, "the express job's spans", stack)
    spans = _trace_of(job_uuid)
    assert spans is not None
    names = {s["name"] for s in spans}
    assert not any(name.startswith("fairway.dispatcher.") for name in names), names
    by_id = {s["span_id"]: s for s in spans}

    def ancestors(name: str) -> list[str]:
        span, found = named(spans, name), []
        while span is not None and span.get("parent_id") in by_id:
            span = by_id[span["parent_id"]]
            found.append(span["name"])
        return found

    # The API's spans name the job by the id users are shown, as the logs do.
    public = f"job_{uuid.UUID(job_id).hex}"
    for name in ("fairway.api.insert", "fairway.api.handoff"):
        span = named(spans, name)
        assert span is not None and span["attributes"].get("fairway.job") == public, name
    # The hand-off continues the insert's request, and the worker continues the hand-off.
    assert "POST /v1/chat/completions" in ancestors("fairway.api.handoff")
    assert "fairway.api.handoff" in ancestors("fairway.worker.receive")
    assert "fairway.worker.first_token" in ancestors("fairway.api.relay")


def test_tickets_expire_with_a_stopped_dispatcher_and_jobs_then_wait_for_it(
        stack: Stack) -> None:
    api = _api(stack)
    wait_until(lambda: _tickets(stack), 20, "express tickets lent", stack)
    _signal_dispatcher(stack, signal.SIGSTOP)
    try:
        wait_until(lambda: not _tickets(stack), 10, "lent tickets expired", stack)
        with cf.ThreadPoolExecutor(1) as pool:
            future = pool.submit(_ask, api, "wait for the dispatcher")
            with pytest.raises(cf.TimeoutError):
                future.result(timeout=2)  # queued: no one places it
            _signal_dispatcher(stack, signal.SIGCONT)
            resp = future.result(timeout=30)
        job = _job(stack, resp.id.split("-", 1)[1])
        assert (job.status, job.attempt, job.worker_id) == ("succeeded", 1, "ex-a")
    finally:
        _signal_dispatcher(stack, signal.SIGCONT)


def test_a_job_placed_on_a_worker_the_policy_lacks_is_queued_again(stack: Stack) -> None:
    api = _api(stack)
    redis = Redis.from_url(stack.redis_url)
    wait_until(lambda: _tickets(stack), 20, "express tickets lent", stack)
    _signal_dispatcher(stack, signal.SIGSTOP)
    try:
        redis.delete(express_key(MODEL))
        redis.rpush(express_key(MODEL), "ghost|g1")
        with cf.ThreadPoolExecutor(1) as pool:
            future = pool.submit(_ask, api, "placed on a ghost")
            wait_until(lambda: redis.xlen(handoff_stream("ghost")) == 1, 10,
                       "the API's hand-off to the ghost", stack)
            (_, fields), = redis.xrange(handoff_stream("ghost"))
            entry = handoff.decode(fields)
            assert entry is not None
            assert _job(stack, entry.job_id).status == "assigned"
            _signal_dispatcher(stack, signal.SIGCONT)
            resp = future.result(timeout=30)
        job = _job(stack, resp.id.split("-", 1)[1])
        assert str(job.id) == entry.job_id
        assert (job.status, job.attempt, job.worker_id) == ("succeeded", 2, "ex-a")
    finally:
        _signal_dispatcher(stack, signal.SIGCONT)
        redis.delete(handoff_stream("ghost"))
