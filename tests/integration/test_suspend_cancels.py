"""Suspending a tenant stops its queued work: queued API requests are cancelled (their
waiting HTTP calls end with 403 tenant_suspended), open batches are cancelled as a batch
cancel does, the batch's quota reservation is settled, and the audit log says what stopped.
Another tenant's queued work is untouched.

Own stack with no worker: the configured model is in the catalog, so requests and batch lines
are accepted and simply stay queued, which makes "queued at suspension time" deterministic.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import openai
import pytest
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.batches import Batch
from service.store.models.jobs import Job
from tests.support.admin import Admin
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def idle_stack() -> Iterator[Stack]:
    env = {
        "FAIRWAY_SERVED_MODEL_NAME": MODEL,
        "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
        "FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS": "2",
        "FAIRWAY_BATCH_MAINTENANCE_SECONDS": "0.3",
        "FAIRWAY_REQUEST_TIMEOUT_SECONDS": "90",
    }
    with own_stack("suspend", env, workers=()) as stack:
        yield stack


def chat(stack: Stack, key: str, **extra: object) -> httpx.Response:
    return httpx.post(stack.base_url + CHAT, timeout=120,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "max_tokens": 8,
                            "messages": [{"role": "user", "content": "hello"}], **extra})


def jobs_of(stack: Stack, tenant_id: str) -> list[Job]:
    with sync_session(stack.database_url) as session:
        return list(session.scalars(select(Job).where(Job.tenant_id == uuid.UUID(tenant_id)))
                    .all())


def batch_row(stack: Stack, batch_id: str) -> Batch:
    with sync_session(stack.database_url) as session:
        row = session.get(Batch, uuid.UUID(batch_id.removeprefix("batch_")))
        assert row is not None
        return row


def test_suspend_cancels_queued_requests_and_batches(idle_stack: Stack):
    admin = Admin(idle_stack.base_url)
    tid, key = admin.create_tenant(f"s-{uuid.uuid4().hex[:8]}")
    other_tid, other_key = admin.create_tenant(f"o-{uuid.uuid4().hex[:8]}")
    api = openai.OpenAI(base_url=idle_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=30)
    data = b"".join(json.dumps({
        "custom_id": f"l{i}", "method": "POST", "url": CHAT,
        "body": {"model": MODEL, "max_tokens": 8,
                 "messages": [{"role": "user", "content": "hello"}]}}).encode() + b"\n"
        for i in range(5))
    f = api.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")
    wait_until(lambda: api.batches.retrieve(batch.id).status == "in_progress", 30,
               "batch in progress", idle_stack)
    assert admin.quotas(tid)["live"]["batch_enqueued_tokens"] > 0

    with ThreadPoolExecutor(4) as pool:
        waiting: list[Future[httpx.Response]] = [
            pool.submit(chat, idle_stack, key),
            pool.submit(chat, idle_stack, key, stream=True),
            pool.submit(chat, idle_stack, key, service_tier="flex")]
        bystander = pool.submit(chat, idle_stack, other_key)
        wait_until(lambda: sum(j.batch_id is None and j.status == "queued"
                               for j in jobs_of(idle_stack, tid)) == 3,
                   30, "three queued requests", idle_stack)
        wait_until(lambda: [j.status for j in jobs_of(idle_stack, other_tid)] == ["queued"],
                   30, "the other tenant's request queued", idle_stack)

        started = time.monotonic()
        admin.ok("PATCH", f"/admin/tenants/{tid}", json={"suspended": True})
        # The waiting calls end now, not at their timeout.
        plain, streamed, flex = (w.result(timeout=15) for w in waiting)
        assert time.monotonic() - started < 15
        for resp in (plain, flex):
            assert resp.status_code == 403, resp.text
            assert resp.json()["error"]["code"] == "tenant_suspended"
        assert streamed.status_code == 200 and "tenant_suspended" in streamed.text

        jobs = jobs_of(idle_stack, tid)
        requests = [j for j in jobs if j.batch_id is None]
        assert len(requests) == 3
        assert all(j.status == "cancelled" and (j.error or {}).get("code") == "tenant_suspended"
                   for j in requests)
        lines = [j for j in jobs if j.batch_id is not None]
        assert len(lines) == 5 and {j.status for j in lines} == {"cancelled"}
        assert batch_row(idle_stack, batch.id).status in ("cancelling", "cancelled")

        # The batch ends `cancelled` (maintenance), every line in its error file, and its
        # quota reservation is released.
        wait_until(lambda: batch_row(idle_stack, batch.id).status == "cancelled", 30,
                   "batch cancelled", idle_stack)
        final = batch_row(idle_stack, batch.id)
        # Never run: cancelled, not failed.
        assert final.final_counts == {"total": 5, "completed": 0, "failed": 0, "cancelled": 5}
        assert admin.quotas(tid)["live"]["batch_enqueued_tokens"] == 0

        # The other tenant's request is still queued; the suspended tenant is refused.
        time.sleep(1)
        assert [j.status for j in jobs_of(idle_stack, other_tid)] == ["queued"]
        assert not bystander.done()
        assert chat(idle_stack, key).status_code == 403

        audit = admin.ok("GET", "/admin/audit", params={"target_id": tid})["data"]
        entry = next(e for e in audit if e["action"] == "tenant.suspend")
        assert entry["details"] == {"cancelled_jobs": 3, "cancelled_batches": [batch.id]}
        assert entry["actor"] == "admin:pytest"

        # Unsuspending does not bring anything back; suspending the bystander ends its call.
        admin.ok("PATCH", f"/admin/tenants/{tid}", json={"suspended": False})
        assert {j.status for j in jobs_of(idle_stack, tid)} == {"cancelled"}
        admin.ok("PATCH", f"/admin/tenants/{other_tid}", json={"suspended": True})
        assert bystander.result(timeout=15).status_code == 403
