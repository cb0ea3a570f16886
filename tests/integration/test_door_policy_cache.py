"""The door's policy cache (service.quotas.door_policy): a tenant's repeated admissions read
no Postgres, and an admin's change binds the very next call once its generation is bumped
(the admin routes do that after their commit; tests/integration/test_quotas_api.py drives
them end to end). Here the door itself (``service.api.door.Door.admit``), in process, against the
real Postgres and Redis."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import event

from service.api import door
from service.api.slo_gate import SloGate
from service.cli.bootstrap import create_tenant_with_key
from service.jobs.door_request import DoorRequest
from service.quotas.door_policy import (
    FRESH_READ_TASK,
    POLICY_CACHE_TTL_S,
    DoorPolicies,
    PolicyCache,
    bump_policy_generation,
)
from service.quotas.reservation import RequestQuotas
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.quotas import TenantQuota
from service.store.models.tenants import Tenant
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import QuotaStore
from service.store.settings import Settings
from service.web.errors import APIError

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _overrides(database_url: str, tenant_id: uuid.UUID, overrides: dict[str, Any]) -> None:
    """An admin's quota change, committed (the generation is the caller's to bump)."""
    with sync_session(database_url) as session:
        row = session.get(TenantQuota, tenant_id)
        if row is None:
            session.add(TenantQuota(tenant_id=tenant_id, overrides=overrides))
        else:
            row.overrides = overrides
        session.commit()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Door:
    """One API process's door: its app state, and every statement it sends to Postgres."""

    def __init__(self, database_url: str, redis_url: str) -> None:
        settings = Settings(database_url=database_url, redis_url=redis_url)
        self.settings = settings.model_copy(update={"api": settings.api.model_copy(
            update={"slo_admission": False})})
        self.redis = Redis.from_url(redis_url)
        self.sessionmaker = async_sessionmaker_for(database_url)
        self.clock = FakeClock()
        policies = DoorPolicies(PolicyCache(clock=self.clock), self.sessionmaker)
        self.door = door.Door(self.settings, SloGate(self.redis), policies,
                              RequestQuotas(QuotaStore(self.redis), policies))
        self.statements: list[str] = []
        self.tasks: list[asyncio.Task[Any] | None] = []  # which task sent each statement

        def sent(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            self.statements.append(statement)
            self.tasks.append(asyncio.current_task())

        event.listen(self.sessionmaker.kw["bind"].sync_engine, "before_cursor_execute", sent)

    async def admit(self, tenant: Tenant) -> tuple[int, int]:
        """(HTTP status, policy reads) of one admission, its slot given back at once."""
        before = len(self.statements)
        async with self.sessionmaker() as session:
            try:
                admitted = await self.door.admit(session, DoorRequest(
                    tenant, None, "m", "chat.completions", dict(BODY), 8, None))
            except APIError as exc:
                status = exc.status
            else:
                await admitted.admission.release()
                status = 200
        mine = asyncio.current_task()  # or the shared read it awaited; not a renewal's
        reads = sum("FROM tiers" in s for s, task in zip(self.statements[before:],
                                                         self.tasks[before:], strict=True)
                    if task is mine or (task is not None
                                        and task.get_name() == FRESH_READ_TASK))
        return status, reads


@pytest.fixture
def tenant(database_url: str) -> Tenant:
    tenant_id, _ = create_tenant_with_key(Settings(database_url=database_url),
                                          f"policy-cache-{uuid.uuid4().hex[:6]}")
    with sync_session(database_url) as session:
        found = session.get(Tenant, tenant_id)
        assert found is not None
        session.expunge(found)
        return found


def test_repeated_admissions_read_the_policy_once_it_is_cached(
        database_url: str, test_redis_url: str, tenant: Tenant) -> None:
    door = Door(database_url, test_redis_url)

    async def run() -> list[tuple[int, int]]:
        return [await door.admit(tenant) for _ in range(5)]

    results = asyncio.run(run())
    assert all(status == 200 for status, _ in results)
    # The first read is not cached (no generation seen before it); the second is.
    assert [reads for _, reads in results] == [1, 1, 0, 0, 0]


def test_a_cold_burst_shares_one_policy_read(
        database_url: str, test_redis_url: str, tenant: Tenant) -> None:
    """Thirty requests of a tenant not cached yet, at once: one read of its policy, which
    they all wait on, instead of thirty queries standing in line for the pool."""
    door = Door(database_url, test_redis_url)

    async def run() -> list[tuple[int, int]]:
        return list(await asyncio.gather(*(door.admit(tenant) for _ in range(30))))

    results = asyncio.run(run())
    assert all(status == 200 for status, _ in results)
    assert sum("FROM tiers" in statement for statement in door.statements) == 1


def test_past_half_its_life_the_policy_is_renewed_off_the_requests_path(
        database_url: str, test_redis_url: str, tenant: Tenant) -> None:
    """A tenant sending a request every few seconds: the entry answers while a background
    read renews it, so no request of its reads the policy."""
    door = Door(database_url, test_redis_url)

    async def run() -> tuple[list[tuple[int, int]], int]:
        out = [await door.admit(tenant) for _ in range(3)]  # cached from the second
        before = len(door.statements)
        door.clock.now += POLICY_CACHE_TTL_S * 0.6
        out.append(await door.admit(tenant))  # answered from the entry; the renewal starts
        cache: PolicyCache = door.door.policies.cache  # type: ignore[attr-defined]
        for _ in range(200):  # until the renewal is stored
            entry = cache.get(tenant.id, tenant.plan)
            if entry is not None and entry.read_at == door.clock.now:
                break
            await asyncio.sleep(0.01)
        renewals = sum("FROM tiers" in s for s in door.statements[before:])
        door.clock.now += POLICY_CACHE_TTL_S * 0.6  # the first entry's life is over
        out.append(await door.admit(tenant))  # the renewed one answers
        return out, renewals

    results, renewals = asyncio.run(run())
    assert results == [(200, 1), (200, 1), (200, 0), (200, 0), (200, 0)]
    assert renewals == 1


def test_an_admin_change_binds_the_very_next_call_once_its_generation_is_bumped(
        database_url: str, test_redis_url: str, tenant: Tenant) -> None:
    door = Door(database_url, test_redis_url)
    store = QuotaStore(door.redis)

    async def run() -> list[tuple[int, int]]:
        out = [await door.admit(tenant) for _ in range(3)]  # cached from the second
        await asyncio.to_thread(_overrides, database_url, tenant.id, {"requests_per_minute": 0})
        out.append(await door.admit(tenant))  # not bumped: the cache stands (up to its TTL)
        await bump_policy_generation(door.redis, [tenant.id])
        out.append(await door.admit(tenant))  # bumped: read again, and refused
        await asyncio.to_thread(_overrides, database_url, tenant.id, {})
        await bump_policy_generation(door.redis, [tenant.id])
        out.append(await door.admit(tenant))  # admitted again at once
        live = await store.state(tenant_id=tenant.id, limits=QuotaLimits(concurrent_requests=9))
        out.append((live["concurrent_requests_open"], 0))
        return out

    results = asyncio.run(run())
    assert results[:3] == [(200, 1), (200, 1), (200, 0)]
    assert results[3] == (200, 0)
    assert results[4] == (429, 1)
    assert results[5] == (200, 1)
    # A stale admission took nothing: no slot left open, and requests per minute counted
    # once per admitted request (5 of them; the refused one took nothing either).
    assert results[6] == (0, 0)


def test_a_bump_without_redis_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        await bump_policy_generation(Redis.from_url("redis://127.0.0.1:1/0"), [uuid.uuid4()])

    asyncio.run(run())
    assert "not bumped (Redis away)" in caplog.text



def test_a_stale_cached_policy_takes_nothing_from_the_tenants_quota(
        database_url: str, test_redis_url: str, tenant: Tenant) -> None:
    """Read under an older generation, the script refuses to take anything: the request is
    counted once, under the policy read again (x-ratelimit-remaining-requests stays true)."""
    _overrides(database_url, tenant.id, {"requests_per_minute": 6})
    door = Door(database_url, test_redis_url)
    store = QuotaStore(door.redis)

    async def run() -> tuple[list[tuple[int, int]], float]:
        out = [await door.admit(tenant) for _ in range(3)]  # the third from the cache
        await bump_policy_generation(door.redis, [tenant.id])  # e.g. a change elsewhere
        out.append(await door.admit(tenant))
        live = await store.state(tenant_id=tenant.id,
                                 limits=QuotaLimits(requests_per_minute=6))
        return out, live["requests_per_minute_available"]

    results, available = asyncio.run(run())
    assert results == [(200, 1), (200, 1), (200, 0), (200, 1)]
    assert 2.0 <= available < 2.9  # 6 - 4 requests, plus a few seconds' refill at 0.1/s
