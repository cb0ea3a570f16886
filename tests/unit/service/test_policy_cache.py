"""The door's policy cache: what it trusts, and under which generation (no services)."""

from __future__ import annotations

import asyncio
import time
import uuid

from service.quotas.door_policy import PolicyCache
from service.quotas.policy import TenantPolicy
from service.store.quota_limits import QuotaLimits

POLICY = TenantPolicy("standard", QuotaLimits(), ("default",), 1000, 100)
TENANT = uuid.uuid4()


def test_a_read_before_any_generation_was_seen_is_not_cached() -> None:
    cache = PolicyCache()
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))
    assert cache.get(TENANT, "standard") is None
    cache.observe(TENANT, 3)
    assert cache.stamp(uuid.uuid4()) is None  # generations are per tenant
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))
    cached = cache.get(TENANT, "standard")
    assert cached is not None and cached.generation == 3 and cached.policy == POLICY


def test_the_stamp_is_the_newest_generation_seen() -> None:
    """Admissions may answer out of order: an older generation read late does not win."""
    cache = PolicyCache()
    cache.observe(TENANT, 5)
    cache.observe(TENANT, 4)
    assert cache.stamp(TENANT) == 5


def test_entries_are_per_tenant_and_plan_and_expire() -> None:
    cache = PolicyCache(ttl_s=0.05)
    cache.observe(TENANT, 1)
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))
    assert cache.get(TENANT, "premium") is None and cache.get(uuid.uuid4(), "standard") is None
    cache.drop(TENANT, "premium")  # dropping what is not there is fine
    assert cache.get(TENANT, "standard") is not None
    time.sleep(0.08)
    assert cache.get(TENANT, "standard") is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


NEWER = TenantPolicy("standard", QuotaLimits(), ("default", "flex"), 500, 50)


def test_past_half_its_life_an_entry_is_renewed_once_in_the_background() -> None:
    clock = Clock()
    cache = PolicyCache(ttl_s=10.0, clock=clock, renew_after_s=0.03)
    cache.observe(TENANT, 2)
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))
    reads: list[int] = []

    async def read() -> TenantPolicy:
        reads.append(1)
        cache.observe(TENANT, 3)  # a change committed during the read: stamped before it
        await asyncio.sleep(0)
        return NEWER

    async def run() -> None:
        clock.now += 4.9
        cache.renew_ahead(TENANT, "standard", read)
        await asyncio.sleep(0.01)
        assert reads == []  # still young
        clock.now += 0.2
        cache.renew_ahead(TENANT, "standard", read)
        cache.renew_ahead(TENANT, "standard", read)  # one renewal under way: no second
        assert cache.get(TENANT, "standard").policy == POLICY  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
        assert reads == []  # the read waits past the request that found the entry old
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert reads == [1]
    renewed = cache.get(TENANT, "standard")
    assert renewed is not None and renewed.policy == NEWER and renewed.generation == 2
    clock.now += 9.9  # the renewed entry's own life
    assert cache.get(TENANT, "standard") is not None
    clock.now += 0.2
    assert cache.get(TENANT, "standard") is None


def test_a_failed_renewal_leaves_the_entry_to_expire() -> None:
    clock = Clock()
    cache = PolicyCache(ttl_s=10.0, clock=clock, renew_after_s=0.0)
    cache.observe(TENANT, 1)
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))

    async def read() -> TenantPolicy:
        raise ConnectionError("postgres away")

    async def run() -> None:
        clock.now += 6
        cache.renew_ahead(TENANT, "standard", read)
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert cache.get(TENANT, "standard").policy == POLICY  # type: ignore[union-attr]
    clock.now += 4.1
    assert cache.get(TENANT, "standard") is None
