"""A job's end says whether its worker settled the quota reservation (``Final.settled``), so
the API's release at the request's end, which would find nothing, is skipped
(``Admission.settled_by_worker``): one Redis call fewer per realtime job."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from service.cli.bootstrap import create_tenant_with_key
from service.store import job_stream
from service.store.keys import stream_key
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import QuotaStore, TenantKeys
from service.store.settings import Settings, to_libpq_url
from tests.integration.test_ahead_handoff import body
from tests.integration.test_early_start import run_early
from tests.integration.test_job_writes import queued_claimed_job
from worker import runner


@pytest.fixture
def database_url(private_database_url: str) -> str:
    return private_database_url


@pytest.fixture
def tenant_id(database_url: str) -> uuid.UUID:
    return create_tenant_with_key(Settings(database_url=database_url), "settles")[0]


def _final(redis_url: str, job_id: uuid.UUID) -> job_stream.Entry | None:
    (_, fields), = SyncRedis.from_url(redis_url).xrevrange(stream_key(job_id), count=1)
    return job_stream.parse(fields)


def _run(database_url: str, redis_url: str, tenant_id: uuid.UUID, *, reserved: bool
         ) -> job_stream.Entry | None:
    job_id = queued_claimed_job(database_url, tenant_id, 4)

    async def admit() -> None:  # as the door does: the reservation keyed by the job's id
        redis = Redis.from_url(redis_url)
        try:
            decision = await QuotaStore(redis).admit(
                tenant_id=tenant_id, limits=QuotaLimits(concurrent_requests=4), tokens=20,
                ticket=job_id, batch=False, hold_slot=True, slot_ttl_s=60)
            assert decision.admitted
        finally:
            await redis.aclose()

    if reserved:
        asyncio.run(admit())
    outcome, _ = asyncio.run(run_early(database_url, redis_url, job_id, 1, body(tenant_id, 4),
                                       speed=float("inf")))
    assert outcome == "succeeded"
    return _final(redis_url, job_id)


def test_the_end_says_the_worker_settled_and_freed_the_slot(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    final = _run(database_url, test_redis_url, tenant_id, reserved=True)
    assert isinstance(final, job_stream.Final) and final.settled
    # Settling freed the slot too: nothing is left for the API's release to do.
    assert SyncRedis.from_url(test_redis_url).zcard(TenantKeys(str(tenant_id)).conc) == 0


def test_with_no_reservation_left_the_end_says_not_settled(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    """E.g. the API released it already (its client left): the API releases as before."""
    final = _run(database_url, test_redis_url, tenant_id, reserved=False)
    assert isinstance(final, job_stream.Final) and not final.settled


def test_the_settle_runs_after_the_end_is_committed_with_no_row_lock_held(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat job's end is one statement committed by itself; the Redis settle waits for it,
    so a failed write settles nothing and no row lock waits on Redis."""
    seen: list[str] = []
    settle = runner.account_job_end

    async def checking_settle(redis: Redis, **kwargs: Any) -> bool:
        with psycopg.connect(to_libpq_url(database_url), autocommit=True) as conn:
            try:  # NOWAIT: fails at once if the end's transaction still held the row
                status, = conn.execute("SELECT status FROM jobs WHERE id = %s FOR UPDATE NOWAIT",
                                       (kwargs["job_id"],)).fetchone() or ("missing",)
                seen.append(str(status))
            except psycopg.errors.LockNotAvailable:
                seen.append("locked")
        return await settle(redis, **kwargs)

    monkeypatch.setattr(runner, "account_job_end", checking_settle)
    final = _run(database_url, test_redis_url, tenant_id, reserved=True)
    assert seen == ["succeeded"]
    assert isinstance(final, job_stream.Final) and final.settled
