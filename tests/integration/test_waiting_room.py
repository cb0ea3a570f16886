"""Scale to zero at the API: a model the catalog names but no worker serves is listed, keeps
the API ready, and its requests wait in the waiting room: served once a worker comes up late
(a stream kept alive by comment lines meanwhile), or, when none comes within the bound, 503 +
Retry-After with the job stored and ended, never a 429. Real API, dispatcher and sim workers;
the official SDK as the client."""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from service.cli.embedded import free_port
from service.store.db import sync_session
from service.store.models.jobs import Job, JobStatus
from tests.integration._scrape import scheduler_url, scrape, total
from tests.support.admin import NO_LIMITS, Admin
from tests.support.services import (
    PATIENT_PLAN,
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack, wait_until

pytestmark = pytest.mark.integration
BASE, LATE, NEVER = "zero-base", "zero-late", "zero-never"
SHORT_ROOM_S = 3.0


@pytest.fixture(scope="module")
def zero_stack() -> Iterator[tuple[Stack, str]]:
    """API + dispatcher and no worker; a second API with a short waiting room (its URL)."""
    env = {"FAIRWAY_SERVED_MODEL_NAME": BASE, "FAIRWAY_CATALOG_MODELS": f"{LATE},{NEVER}",
           "FAIRWAY_HEARTBEAT_SECONDS": "0.5", "FAIRWAY_LEASE_SECONDS": "5",
           "FAIRWAY_WAITING_ROOM_SECONDS": "90", "FAIRWAY_LOG_LEVEL": "INFO"}
    database, redis = create_database("fairway_zero"), claim_redis_db()
    stack = Stack(database, redis, env_overrides=env)
    try:
        stack.start_api()
        stack.start_dispatcher()
        port = free_port()
        stack.spawn("api-short", ["api", "--port", str(port)],
                    FAIRWAY_WAITING_ROOM_SECONDS=str(SHORT_ROOM_S))
        short = f"http://127.0.0.1:{port}"
        wait_until(lambda: _status(short + "/readyz") == 200, 60, "api-short", stack)
        yield stack, short
    finally:
        stack.stop()
        drop_database(database)
        release_redis_db(redis)
        shutil.rmtree(stack.log_dir, ignore_errors=True)


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.TransportError:
        return None


def _tenant(stack: Stack) -> tuple[str, str]:
    admin = Admin(stack.base_url)
    tenant_id, key = admin.create_tenant(f"zero-{uuid.uuid4().hex[:8]}", plan=PATIENT_PLAN)
    admin.set_quotas(tenant_id, **NO_LIMITS)
    return tenant_id, key


def _jobs(stack: Stack, tenant_id: str) -> list[Job]:
    with sync_session(stack.database_url) as session:
        return list(session.scalars(select(Job).where(Job.tenant_id == uuid.UUID(tenant_id))))


def _desired(stack: Stack, model: str, reason: str) -> float | None:
    try:
        samples = scrape(scheduler_url(stack))
    except Exception:  # its endpoint not published yet
        return None
    return total(samples, "fairway_desired_workers", model_name=model, reason=reason)


def _client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=120)


def test_models_without_workers_are_listed_and_the_api_stays_ready(
        zero_stack: tuple[Stack, str]) -> None:
    stack, _ = zero_stack
    _, key = _tenant(stack)
    listed = {m.id for m in _client(stack.base_url, key).models.list()}
    assert {BASE, LATE, NEVER} <= listed
    ready = httpx.get(stack.base_url + "/readyz", timeout=5)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["workers"][BASE] == 0


def test_a_request_waits_for_a_late_worker_and_is_served(
        zero_stack: tuple[Stack, str]) -> None:
    stack, _ = zero_stack
    tenant_id, key = _tenant(stack)
    client = _client(stack.base_url, key)

    def chat() -> str:
        out = client.chat.completions.create(
            model=LATE, max_tokens=4, temperature=0,
            messages=[{"role": "user", "content": "wake up"}])
        return out.choices[0].message.content or ""

    def stream() -> list[str]:
        lines: list[str] = []
        with httpx.stream("POST", stack.base_url + "/v1/chat/completions", timeout=120,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"model": LATE, "max_tokens": 4, "stream": True,
                                "messages": [{"role": "user", "content": "wake up"}]}) as r:
            assert r.status_code == 200, r.read()
            lines.extend(line for line in r.iter_lines() if line)
        return lines

    with cf.ThreadPoolExecutor(2) as pool:
        waited, streamed = pool.submit(chat), pool.submit(stream)
        wait_until(lambda: len(_jobs(stack, tenant_id)) == 2, 30, "both jobs stored", stack)
        assert {j.status for j in _jobs(stack, tenant_id)} == {JobStatus.QUEUED}
        # The waiting requests wake the model: its autoscaler asks for one worker.
        wait_until(lambda: _desired(stack, LATE, "wake") == 1, 20, "wake", stack)
        time.sleep(12)  # past the stream's first keep-alive; both still wait
        assert not waited.done() and not streamed.done()
        stack.start_worker("late-1", FAIRWAY_SERVED_MODEL_NAME=LATE)
        text, lines = waited.result(timeout=90), streamed.result(timeout=90)
    assert text
    assert ": waiting for a worker" in lines
    assert lines[-1] == "data: [DONE]"
    assert any('"content"' in line for line in lines)
    jobs = _jobs(stack, tenant_id)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}


def test_no_worker_within_the_bound_is_a_503_with_retry_after_and_the_job_ends(
        zero_stack: tuple[Stack, str]) -> None:
    stack, short = zero_stack
    tenant_id, key = _tenant(stack)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        _client(short, key).chat.completions.create(
            model=NEVER, max_tokens=4, messages=[{"role": "user", "content": "anyone?"}])
    took = time.monotonic() - started
    error: Any = caught.value
    assert error.status_code == 503  # not a 429: the service is starting, not refusing
    assert int(error.response.headers["retry-after"]) > 0
    assert error.code == "model_unavailable"
    assert SHORT_ROOM_S <= took < SHORT_ROOM_S + 10
    # A stream held before its headers (the bound is shorter than a keep-alive) gets the
    # same status, not an opened stream.
    with httpx.stream("POST", short + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": NEVER, "max_tokens": 4, "stream": True,
                            "messages": [{"role": "user", "content": "anyone?"}]}) as r:
        assert r.status_code == 503
        assert r.headers["retry-after"]
        assert r.read() and r.json()["error"]["code"] == "model_unavailable"
    # Nothing lost: both requests were stored as jobs, and both ended as such.
    jobs = _jobs(stack, tenant_id)
    assert len(jobs) == 2
    assert {j.status for j in jobs} == {JobStatus.FAILED}
    assert all((j.error or {}).get("code") == "model_unavailable" and j.finished_at
               for j in jobs)
