"""The door's policy cache: what it trusts, and under which generation (no services)."""

from __future__ import annotations

import time
import uuid

from service.quotas.policy import TenantPolicy
from service.quotas.policy_cache import PolicyCache
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


def test_entries_are_per_tenant_and_tier_and_expire() -> None:
    cache = PolicyCache(ttl_s=0.05)
    cache.observe(TENANT, 1)
    cache.store(TENANT, "standard", POLICY, cache.stamp(TENANT))
    assert cache.get(TENANT, "premium") is None and cache.get(uuid.uuid4(), "standard") is None
    cache.drop(TENANT, "premium")  # dropping what is not there is fine
    assert cache.get(TENANT, "standard") is not None
    time.sleep(0.08)
    assert cache.get(TENANT, "standard") is None
