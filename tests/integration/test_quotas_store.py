"""The quota scripts against real Redis, under real concurrency (asyncio.gather of many
clients, each its own connection from the pool)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from service.quotas.batch import admit_batch, settle_batch
from service.quotas.reservation import admit_request
from service.store.db import async_sessionmaker_for
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import QuotaStore, TenantKeys, month_tag
from service.web.errors import APIError

T = TypeVar("T")


def run(fn: Callable[[QuotaStore], Awaitable[T]], url: str) -> T:
    async def go() -> T:
        redis = Redis.from_url(url, max_connections=256)
        try:
            return await fn(QuotaStore(redis))
        finally:
            await redis.aclose()

    return asyncio.run(go())


async def admit(store: QuotaStore, tenant: uuid.UUID, limits: QuotaLimits, tokens: int = 10,
                **kw: Any):  # type: ignore[no-untyped-def]
    kw.setdefault("batch", False)
    kw.setdefault("hold_slot", True)
    kw.setdefault("ticket", uuid.uuid4())
    decision = await store.admit(tenant_id=tenant, limits=limits, tokens=tokens,
                                 slot_ttl_s=60, **kw)
    if decision.needs_seed:
        await store.seed_month(tenant_id=tenant, used_tokens=0)
        return await admit(store, tenant, limits, tokens, **kw)
    return decision


@pytest.mark.parametrize(("n", "k"), [(50, 7), (200, 1)])
def test_parallel_requests_exactly_k_pass(test_redis_url: str, n: int, k: int):
    tenant = uuid.uuid4()
    limits = QuotaLimits(requests_per_minute=k)

    async def go(store: QuotaStore) -> list[Any]:
        return await asyncio.gather(*(admit(store, tenant, limits) for _ in range(n)))

    decisions = run(go, test_redis_url)
    assert sum(d.admitted for d in decisions) == k
    refused = [d for d in decisions if not d.admitted]
    assert {d.reason for d in refused} == {"requests_per_minute"}
    # One request's worth of refill at k/minute: at most 60/k seconds, at least 1.
    assert all(1 <= d.retry_after_s <= 60 // k + 1 for d in refused)


def test_concurrent_slots_and_release(test_redis_url: str):
    tenant = uuid.uuid4()
    limits = QuotaLimits(concurrent_requests=3)

    async def go(store: QuotaStore) -> tuple[int, bool, bool]:
        tickets = [uuid.uuid4() for _ in range(20)]
        ds = await asyncio.gather(*(admit(store, tenant, limits, ticket=t) for t in tickets))
        admitted = [t for t, d in zip(tickets, ds, strict=True) if d.admitted]
        again = (await admit(store, tenant, limits)).admitted
        await store.release_slot(tenant_id=tenant, ticket=admitted[0])
        after = (await admit(store, tenant, limits)).admitted
        return len(admitted), again, after

    count, again, after = run(go, test_redis_url)
    assert (count, again, after) == (3, False, True)


def test_token_reservation_corrected_by_settle(test_redis_url: str):
    tenant = uuid.uuid4()
    limits = QuotaLimits(tokens_per_minute=6000, monthly_tokens=10**9)
    job = uuid.uuid4()

    async def go(store: QuotaStore) -> dict[str, Any]:
        first = await admit(store, tenant, limits, tokens=5000, ticket=job)
        blocked = await admit(store, tenant, limits, tokens=5000)
        reserved = await store.settle(tenant_id=tenant, ref=job, actual_tokens=300)
        again = await store.settle(tenant_id=tenant, ref=job, actual_tokens=300)
        state = await store.state(tenant_id=tenant, limits=limits)
        second = await admit(store, tenant, limits, tokens=5000)
        return {"first": first.admitted, "blocked": blocked, "reserved": reserved,
                "again": again, "state": state, "second": second.admitted}

    out = run(go, test_redis_url)
    assert out["first"] and not out["blocked"].admitted
    assert out["blocked"].reason == "tokens_per_minute"
    assert 1 <= out["blocked"].retry_after_s <= 60
    assert out["reserved"] == 5000 and out["again"] is None  # settle is idempotent
    # 6000 - 300 charged (plus a little refill), not 6000 - 5000.
    assert 5600 <= out["state"]["tokens_per_minute_available"] <= 6000
    assert out["state"]["monthly_tokens_used"] == 300
    assert out["second"]


def test_monthly_budget_stops_at_limit_and_alerts(test_redis_url: str):
    tenant = uuid.uuid4()
    limits = QuotaLimits(monthly_tokens=1000, monthly_alert_percent=75)

    async def go(store: QuotaStore) -> list[Any]:
        return [await admit(store, tenant, limits, tokens=300) for _ in range(4)]

    ds = run(go, test_redis_url)
    assert [d.admitted for d in ds] == [True, True, True, False]
    assert [d.alert_crossed for d in ds[:3]] == [False, False, True]  # 900 >= 750
    assert ds[3].reason == "monthly_tokens" and ds[3].retry_after_s >= 1


def test_month_counter_needs_seed_when_missing(test_redis_url: str):
    tenant = uuid.uuid4()
    limits = QuotaLimits(monthly_tokens=1000)

    async def go(store: QuotaStore) -> tuple[bool, bool, int]:
        first = await store.admit(tenant_id=tenant, limits=limits, tokens=10,
                                  ticket=uuid.uuid4(), batch=False, hold_slot=False,
                                  slot_ttl_s=60)
        await store.seed_month(tenant_id=tenant, used_tokens=995)  # e.g. from Postgres usage
        second = await admit(store, tenant, limits, tokens=10)
        month = TenantKeys(str(tenant)).month(month_tag(dt.datetime.now(dt.UTC)))
        return first.needs_seed, second.admitted, int(await store.redis.get(month))

    needs_seed, admitted, used = run(go, test_redis_url)
    assert needs_seed and not admitted and used == 995


def test_batch_enqueued_tokens(test_redis_url: str):
    tenant = uuid.uuid4()
    limits = QuotaLimits(batch_enqueued_tokens=1000)
    b1 = uuid.uuid4()

    async def go(store: QuotaStore) -> list[bool]:
        a = await admit(store, tenant, limits, tokens=700, ticket=b1, batch=True,
                        hold_slot=False)
        b = await admit(store, tenant, limits, tokens=400, batch=True, hold_slot=False)
        await store.settle(tenant_id=tenant, ref=b1, actual_tokens=650)
        c = await admit(store, tenant, limits, tokens=400, batch=True, hold_slot=False)
        d = await admit(store, tenant, limits, tokens=5000, batch=False)  # realtime: not counted
        return [a.admitted, b.admitted, c.admitted, d.admitted]

    assert run(go, test_redis_url) == [True, False, True, True]


class _Tenant:
    def __init__(self, tenant_id: uuid.UUID, plan: str = "standard") -> None:
        self.id, self.plan = tenant_id, plan


def _with_session(database_url: str, fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
    async def go() -> T:
        async with async_sessionmaker_for(database_url)() as session:
            return await fn(session)

    return asyncio.run(go())


def test_redis_down_fails_closed_with_503(database_url: str, make_tenant):
    tenant_id, _ = make_tenant("down")

    async def go(session: AsyncSession) -> APIError:
        redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
        try:
            with pytest.raises(APIError) as err:
                await admit_request(session, QuotaStore(redis), tenant=_Tenant(tenant_id),
                                    body={"prompt": "hi"}, max_tokens=5, slot_ttl_s=60)
            return err.value
        finally:
            await redis.aclose()

    err = _with_session(database_url, go)
    assert err.status == 503 and err.code == "quota_unavailable"
    assert err.headers == {"Retry-After": "1"}


def test_batch_admission_helpers(database_url: str, test_redis_url: str, make_tenant):
    tenant_id, _ = make_tenant("batchq")
    batch_id = uuid.uuid4()

    async def go(session: AsyncSession) -> tuple[int, int]:
        redis = Redis.from_url(test_redis_url)
        store = QuotaStore(redis)
        try:
            # Standard plan: 50M enqueued tokens. 40M fits once, not twice.
            await admit_batch(session, store, tenant=_Tenant(tenant_id), batch_id=batch_id,
                              tokens=40_000_000)
            with pytest.raises(APIError) as err:
                await admit_batch(session, store, tenant=_Tenant(tenant_id),
                                  batch_id=uuid.uuid4(), tokens=40_000_000)
            await settle_batch(store, tenant_id=tenant_id, batch_id=batch_id,
                               actual_tokens=1000)
            queued = int(await redis.get(TenantKeys(str(tenant_id)).batch) or 0)
            return err.value.status, queued
        finally:
            await redis.aclose()

    assert _with_session(database_url, go) == (429, 0)


def test_a_refusal_reports_the_buckets_and_what_the_limit_counts(test_redis_url: str):
    """What the 429's message and x-ratelimit headers are made of (service.quotas.refusal)."""
    tenant = uuid.uuid4()
    limits = QuotaLimits(requests_per_minute=2, tokens_per_minute=1000, concurrent_requests=5,
                         monthly_tokens=10**6)

    async def go(store: QuotaStore) -> list[Any]:
        out = [await admit(store, tenant, limits, tokens=100) for _ in range(3)]
        slots = QuotaLimits(concurrent_requests=1)
        other = uuid.uuid4()
        out.append(await admit(store, other, slots))
        out.append(await admit(store, other, slots))
        month = QuotaLimits(monthly_tokens=250)
        third = uuid.uuid4()
        out.append(await admit(store, third, month, tokens=200))
        out.append(await admit(store, third, month, tokens=100))
        return out

    first, second, rpm, _, conc, _, month = run(go, test_redis_url)
    assert first.admitted and second.admitted and not rpm.admitted
    assert (rpm.reason, rpm.remaining_requests, rpm.used) == ("requests_per_minute", 0, None)
    assert 798 <= (rpm.remaining_tokens or 0) <= 800  # nothing taken by the refusal
    assert (conc.reason, conc.used, conc.remaining_requests) == ("concurrent_requests", 1, None)
    assert (month.reason, month.used) == ("monthly_tokens", 200)


def test_concurrency_retry_after_is_when_a_slot_should_free(test_redis_url: str):
    """Retry-After of a concurrency refusal comes from how long the tenant's requests hold a
    slot, less the oldest open one's age: not 1 s while requests last seconds."""
    tenant = uuid.uuid4()
    limits = QuotaLimits(concurrent_requests=1)

    async def go(store: QuotaStore) -> tuple[int, int, int]:
        first = await admit(store, tenant, limits)
        assert first.admitted
        no_history = await admit(store, tenant, limits)
        await asyncio.sleep(3.2)  # a request that holds its slot about 3 s
        ticket = uuid.uuid4()
        await store.settle(tenant_id=tenant, ref=ticket, actual_tokens=0)  # nothing: no-op
        open_ticket = await _only_open(store, tenant)
        await store.settle(tenant_id=tenant, ref=open_ticket, actual_tokens=5,
                           free_slot=open_ticket)
        assert (await admit(store, tenant, limits, ticket=ticket)).admitted
        fresh = await admit(store, tenant, limits)  # the open one just started: ~3 s
        await asyncio.sleep(2.0)
        later = await admit(store, tenant, limits)  # it is 2 s old now: ~1 s
        return no_history.retry_after_s, fresh.retry_after_s, later.retry_after_s

    no_history, fresh, later = run(go, test_redis_url)
    assert no_history == 1
    assert fresh in (3, 4), fresh
    assert later in (1, 2), later


async def _only_open(store: QuotaStore, tenant: uuid.UUID) -> uuid.UUID:
    members = await store.redis.zrange(TenantKeys(str(tenant)).conc, 0, -1)
    assert len(members) == 1
    return uuid.UUID(members[0].decode())
