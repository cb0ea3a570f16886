"""Batch quotas through the real API, dispatcher and sim worker: the enqueued-token limit is
checked when a batch's lines are counted (over it: the batch fails with
token_limit_exceeded and no job is left), the reservation is held while the batch runs and
settled once at its end (to real usage), and the monthly budget refuses POST /v1/batches.

Own stack, as tests/integration/test_batches.py has (batches need a files dir and short
maintenance intervals).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator

import openai
import pytest
from redis import Redis
from sqlalchemy import func, select

from service.batches.completion import Due, run_step
from service.files.storage import storage_for
from service.quotas.batch import settle_batch_sync
from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.quota_store import SyncQuotaStore
from service.store.settings import Settings
from tests.support.admin import Admin
from tests.support.stack import Stack, own_stack

MODEL = "sim-model"
CHAT = "/v1/chat/completions"
# What admission reserves per line below: (len("hello") + 8) // 4 + max_tokens.
PROMPT_ESTIMATE = (len("hello") + 8) // 4


@pytest.fixture(scope="module")
def quota_stack() -> Iterator[Stack]:
    env = {
        "FAIRWAY_SERVED_MODEL_NAME": MODEL,
        "FAIRWAY_LEASE_SECONDS": "3",
        "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
        "FAIRWAY_MAX_NUM_SEQS": "8",
        "FAIRWAY_BATCH_MAX_LINES": "300",
        "FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS": "2",
        "FAIRWAY_BATCH_MAINTENANCE_SECONDS": "0.3",
    }
    with own_stack("bquota", env, workers=("bq-1",)) as stack:
        yield stack


@pytest.fixture(scope="module")
def admin(quota_stack: Stack) -> Admin:
    return Admin(quota_stack.base_url)


def new_tenant(stack: Stack, admin: Admin, **overrides: object) -> tuple[str, openai.OpenAI]:
    tenant_id, key = admin.create_tenant(f"bq-{uuid.uuid4().hex[:8]}", "standard")
    if overrides:
        admin.set_quotas(tenant_id, **overrides)
    api = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=30)
    return tenant_id, api


def lines(prefix: str, n: int, max_tokens: int = 64) -> bytes:
    return b"".join(json.dumps({
        "custom_id": f"{prefix}{i}", "method": "POST", "url": CHAT,
        "body": {"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
                 "messages": [{"role": "user", "content": "hello"}]}}).encode() + b"\n"
        for i in range(n))


def submit(api: openai.OpenAI, data: bytes):  # type: ignore[no-untyped-def]
    f = api.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    return api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")


def wait_status(api: openai.OpenAI, batch_id: str, statuses: set[str],
                timeout_s: float = 90):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = api.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        time.sleep(0.1)
    raise TimeoutError(f"batch {batch_id} stuck in {batch.status}")


def live(admin: Admin, tenant_id: str) -> dict[str, object]:
    return admin.quotas(tenant_id)["live"]  # type: ignore[no-any-return]


def job_count(stack: Stack, batch_id: str) -> int:
    with sync_session(stack.database_url) as session:
        return session.scalar(select(func.count()).where(
            Job.batch_id == uuid.UUID(batch_id.removeprefix("batch_")))) or 0


def test_over_the_enqueued_limit_fails_the_batch_and_leaves_no_jobs(quota_stack: Stack,
                                                                    admin: Admin):
    tenant_id, api = new_tenant(quota_stack, admin, batch_enqueued_tokens=100,
                                monthly_tokens=1_000_000)
    need = 3 * (PROMPT_ESTIMATE + 64)
    assert need > 100
    batch = wait_status(api, submit(api, lines("o", 3)).id, {"failed", "in_progress",
                                                              "completed"})
    assert batch.status == "failed" and batch.failed_at
    error = batch.errors.data[0]
    assert error.code == "token_limit_exceeded"
    assert str(need) in (error.message or "") and "100" in (error.message or "")
    assert job_count(quota_stack, batch.id) == 0
    state = live(admin, tenant_id)
    assert state["batch_enqueued_tokens"] == 0 and state["monthly_tokens_used"] == 0
    # One line fits: it runs, and its reservation is gone at the end.
    small = wait_status(api, submit(api, lines("s", 1)).id, {"completed", "failed"})
    assert small.status == "completed", small.errors
    assert live(admin, tenant_id)["batch_enqueued_tokens"] == 0


def test_reservation_held_while_running_then_settled_once(quota_stack: Stack, admin: Admin):
    per_line = PROMPT_ESTIMATE + 64
    tenant_id, api = new_tenant(quota_stack, admin, batch_enqueued_tokens=30 * per_line,
                                monthly_tokens=1_000_000)
    first = submit(api, lines("a", 24))
    running = wait_status(api, first.id, {"in_progress", "completed", "failed"})
    assert running.status == "in_progress", running.errors
    # 24 lines x 64 tokens on 8 sequences take seconds: the reservation is still there.
    state = live(admin, tenant_id)
    assert state["batch_enqueued_tokens"] == 24 * per_line
    assert state["monthly_tokens_used"] == 24 * per_line
    # A second batch that would take the tenant past 30 lines' worth is refused whole.
    second = wait_status(api, submit(api, lines("b", 8)).id, {"failed", "in_progress"})
    assert second.status == "failed"
    assert second.errors.data[0].code == "token_limit_exceeded"
    assert job_count(quota_stack, second.id) == 0

    done = wait_status(api, first.id, {"completed"})
    assert done.request_counts.completed == 24
    state = live(admin, tenant_id)
    assert state["batch_enqueued_tokens"] == 0
    # The month now holds what the lines really used, not the reservation.
    assert state["monthly_tokens_used"] == done.usage.total_tokens

    # Settling again (a repeated maintenance step) changes nothing.
    settings = Settings(database_url=quota_stack.database_url, redis_url=quota_stack.redis_url)
    redis = Redis.from_url(quota_stack.redis_url)
    try:
        batch_uuid = uuid.UUID(done.id.removeprefix("batch_"))
        assert settle_batch_sync(SyncQuotaStore(redis), tenant_id=uuid.UUID(tenant_id),
                                 batch_id=batch_uuid, actual_tokens=0) is None
        with sync_session(quota_stack.database_url) as session:
            for action in ("finalize", "cancel", "expire"):
                assert run_step(session, due=Due(batch_uuid, action),
                                storage=storage_for(settings.files_root), settings=settings,
                                redis=redis) is None
    finally:
        redis.close()
    after = live(admin, tenant_id)
    assert (after["batch_enqueued_tokens"], after["monthly_tokens_used"]) == (
        0, done.usage.total_tokens)

    # With the first batch settled, the second one fits.
    again = wait_status(api, submit(api, lines("b", 8)).id, {"completed", "failed"})
    assert again.status == "completed", again.errors
    assert live(admin, tenant_id)["batch_enqueued_tokens"] == 0


def test_monthly_budget_refuses_batches(quota_stack: Stack, admin: Admin):
    tenant_id, api = new_tenant(quota_stack, admin, monthly_tokens=1_000_000)
    done = wait_status(api, submit(api, lines("m", 2)).id, {"completed", "failed"})
    assert done.status == "completed", done.errors
    used = live(admin, tenant_id)["monthly_tokens_used"]
    assert used == done.usage.total_tokens > 0

    # Budget left, but less than the batch may need: refused when its lines are counted.
    admin.set_quotas(tenant_id, monthly_tokens=used + 10)
    short = wait_status(api, submit(api, lines("n", 2)).id, {"failed", "in_progress"})
    assert short.status == "failed" and short.errors.data[0].code == "insufficient_quota"
    assert job_count(quota_stack, short.id) == 0

    # Already spent: POST /v1/batches itself answers 429 insufficient_quota.
    admin.set_quotas(tenant_id, monthly_tokens=used)
    f = api.files.create(file=("in.jsonl", io.BytesIO(lines("x", 1))), purpose="batch")
    with pytest.raises(openai.RateLimitError) as refused:
        api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")
    assert refused.value.status_code == 429
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["code"] == "insufficient_quota" and body["type"] == "insufficient_quota"
    assert int(refused.value.response.headers["Retry-After"]) >= 1
    assert api.batches.list().data[0].id == short.id  # nothing was created

    # Raising the budget lets the next batch through.
    admin.set_quotas(tenant_id, monthly_tokens=used + 10_000)
    ok = wait_status(api, api.batches.create(input_file_id=f.id, endpoint=CHAT,
                                             completion_window="24h").id,
                     {"completed", "failed"})
    assert ok.status == "completed", ok.errors
