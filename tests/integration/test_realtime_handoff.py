"""The realtime hand-off (service.store.handoff) on a real stack: a realtime job reaches its
worker over the worker's hand-off stream, not a Celery task; duplicate entries run it once;
cancel still aborts it on the worker; a worker that dies with an entry unread has the job
re-run elsewhere, from its row."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from redis import Redis
from sqlalchemy import select

from service.store import handoff
from service.store.db import sync_session
from service.store.keys import handoff_stream, stream_key
from service.store.models.jobs import Job
from tests.conftest import SIM_ENV
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
ENV = {**SIM_ENV, "FAIRWAY_SIM_SPEED": "0.5"}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with own_stack("handoff", ENV, workers=("ho-a",)) as s:
        yield s


def _api(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=60)


def _job(stack: Stack, job_id: uuid.UUID) -> Job:
    with sync_session(stack.database_url) as session:
        job = session.scalar(select(Job).where(Job.id == job_id))
        assert job is not None
        return job


def _messages(stack: Stack, worker_id: str) -> list[handoff.Handoff | None]:
    raw = Redis.from_url(stack.redis_url).xrange(handoff_stream(worker_id))
    return [handoff.decode(fields) for _, fields in raw]


def _entries(stack: Stack, worker_id: str) -> list[tuple[str, int] | None]:
    """(job, attempt) of each hand-off entry."""
    return [(m.job_id, m.attempt) if m else None for m in _messages(stack, worker_id)]


def _tenant(stack: Stack) -> str:
    from service.cli.bootstrap import create_tenant_with_key
    from service.store.settings import Settings
    from tests.support.services import PATIENT_PLAN

    _, key = create_tenant_with_key(Settings(database_url=stack.database_url),
                                    f"ho-{uuid.uuid4().hex[:8]}", plan=PATIENT_PLAN)
    return key


def test_a_realtime_job_arrives_by_hand_off_not_celery(stack: Stack) -> None:
    resp = _api(stack, _tenant(stack)).chat.completions.create(
        model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hand me off"}])
    job_id = uuid.UUID(resp.id.split("-", 1)[1])
    job = _job(stack, job_id)
    assert (job.status, job.attempt, job.worker_id) == ("succeeded", 1, "ho-a")
    entry = next(m for m in _messages(stack, "ho-a") if m and m.job_id == str(job_id))
    assert entry.attempt == 1 and entry.body is not None  # the worker started from its body
    assert entry.body.request["messages"] == [{"role": "user", "content": "hand me off"}]
    # The worker's Celery consumer received no task for it (it logs each task it receives,
    # with its arguments: "Task fairway.run_job[...] received", args [job id, attempt]).
    log = stack.procs["worker-ho-a"].log_path.read_text(errors="replace").splitlines()
    assert any('"job started"' in line and str(job_id) in line for line in log)
    assert not [line for line in log if "received" in line and str(job_id) in line]


def test_duplicate_hand_offs_run_the_job_once(stack: Stack) -> None:
    resp = _api(stack, _tenant(stack)).chat.completions.create(
        model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "only once"}])
    job_id = uuid.UUID(resp.id.split("-", 1)[1])
    before = _job(stack, job_id)
    redis = Redis.from_url(stack.redis_url)
    for _ in range(2):  # a replayed entry for the attempt that already ran
        redis.xadd(handoff_stream("ho-a"), handoff.encode(handoff.Handoff(str(job_id), 1)))
    wait_until(lambda: _entries(stack, "ho-a").count((str(job_id), 1)) == 3, 5,
               "entries added")
    since = time.time()
    wait_until(lambda: stack.engine_idle_since("ho-a", since), 10, "a beat after the replay")
    after = _job(stack, job_id)
    assert (after.status, after.attempt, after.finished_at) == ("succeeded", 1,
                                                                before.finished_at)
    types = [json.loads(json.dumps(f[b"type"].decode()))
             for _, f in redis.xrange(stream_key(job_id))]
    assert types.count("final") == 1


def test_cancel_aborts_a_handed_off_job_on_its_worker(stack: Stack) -> None:
    key = _tenant(stack)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "a long story"}],
            "max_tokens": 2000, "stream": True}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", json=body,
                      headers=headers, timeout=30) as r:
        assert r.status_code == 200
        public_id = r.headers["x-fairway-job"]
        job_id = uuid.UUID(public_id.removeprefix("job_"))
        lines = r.iter_lines()
        while sum(1 for line in [next(lines)] if line.startswith("data: {")) == 0:
            pass  # one chunk: it runs on ho-a
        cancelled = httpx.post(f"{stack.base_url}/v1/jobs/{public_id}/cancel",
                               headers=headers, timeout=10)
        assert cancelled.status_code == 200, cancelled.text
    assert (str(job_id), 1) in _entries(stack, "ho-a")
    wait_until(lambda: stack.aborted_on_request("ho-a", job_id), 10, "abort on the worker")
    job = _job(stack, job_id)
    assert job.status == "cancelled" and job.completion_tokens is None


def test_a_worker_dead_with_its_hand_off_unread_has_the_job_rerun_elsewhere() -> None:
    with own_stack("handoffkill", ENV, workers=("hk-a",)) as stack:
        api = _api(stack, _tenant(stack))
        os.killpg(stack.procs["worker-hk-a"].popen.pid, signal.SIGSTOP)  # reads nothing now
        with cf.ThreadPoolExecutor(1) as pool:
            future = pool.submit(api.chat.completions.create, model=MODEL, max_tokens=4,
                                 messages=[{"role": "user", "content": "left unread"}])
            wait_until(lambda: len(_entries(stack, "hk-a")) == 1, 10, "hand-off to hk-a")
            (entry,) = _messages(stack, "hk-a")
            assert entry is not None and entry.attempt == 1
            assert _job(stack, uuid.UUID(entry.job_id)).status == "assigned"
            stack.kill("worker-hk-a")  # died before reading it
            stack.start_worker("hk-b")
            resp = future.result(timeout=60)
        job = _job(stack, uuid.UUID(resp.id.split("-", 1)[1]))
        assert str(job.id) == entry.job_id
        assert (job.status, job.attempt, job.worker_id) == ("succeeded", 2, "hk-b")
        assert resp.usage.completion_tokens == job.completion_tokens > 0
        assert Redis.from_url(stack.redis_url).exists(handoff_stream("hk-a")) == 0
