"""The door's cache of tenants' policies, so an admission reads no Postgres (issue #16: the
policy read was one of the realtime path's serial round trips).

An admin's change must still bind the tenant's very next call on every API process. So every
admin write that changes a policy bumps the tenant's policy generation in Redis after its
commit (``bump_policy_generation``; a tier's change bumps every tenant on it), and the quota
script of every admission checks it (``QuotaStore.admit(expect_generation=...)``, a key in the
tenant's own slot): limits read under another generation take nothing, and the door reads the
policy again. A policy read from Postgres is stamped with the tenant's generation this process
saw *before* the read, so a change that commits during the read leaves it stale, never
trusted. What a cached policy would refuse before the quota script (a service tier, the SLO
gate) is judged again from a fresh read; the script's own refusals stand, since it checked the
generation.

Writes that bypass the admin API (SQL by hand, a migration) bump nothing: they reach the door
within ``POLICY_CACHE_TTL_S``, which bounds every entry's life. Past half that life an entry
still answers while one background read renews it (``renew_ahead``), so a tenant sending a
request every few seconds is never read on its request's path (issue #16, idle TTFT: every
other request of an idle-paced client paid the read).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache, TTLCache
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.quotas.policy import TenantPolicy
from service.store.quota_store import TenantKeys
from service.store.single_flight import RENEW_AFTER_S, SingleFlight, renew_delay

log = logging.getLogger("fairway.quotas")

POLICY_CACHE_TTL_S = 5.0
POLICY_CACHE_MAX = 10_000


@dataclass(frozen=True, slots=True)
class CachedPolicy:
    policy: TenantPolicy
    generation: int  # the policy generation it was read under
    read_at: float = 0.0  # the cache's clock when stored


class PolicyCache:
    def __init__(self, ttl_s: float = POLICY_CACHE_TTL_S, maxsize: int = POLICY_CACHE_MAX,
                 clock: Callable[[], float] = time.monotonic,
                 renew_after_s: float = RENEW_AFTER_S) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.renew_after_s = renew_delay(ttl_s, renew_after_s)
        self._entries: TTLCache[tuple[uuid.UUID, str], CachedPolicy] = TTLCache(
            maxsize, ttl_s, timer=clock)
        self._renewals: SingleFlight[tuple[uuid.UUID, str], None] = SingleFlight()
        # Each tenant's newest generation an admission read (LRU-bounded: one forgotten is
        # simply not cached until it is seen again).
        self._seen: LRUCache[uuid.UUID, int] = LRUCache(maxsize)

    def get(self, tenant_id: uuid.UUID, tier: str) -> CachedPolicy | None:
        return self._entries.get((tenant_id, tier))

    def stamp(self, tenant_id: uuid.UUID) -> int | None:
        """The generation to stamp on a policy of ``tenant_id`` read from now: None before any
        is known (such a read is not cached)."""
        return self._seen.get(tenant_id)

    def store(self, tenant_id: uuid.UUID, tier: str, policy: TenantPolicy,
              stamp: int | None) -> None:
        if stamp is not None:
            self._entries[(tenant_id, tier)] = CachedPolicy(policy, stamp, self.clock())

    def renew_ahead(self, tenant_id: uuid.UUID, tier: str,
                    read: Callable[[], Awaitable[TenantPolicy]]) -> None:
        """Past half its TTL, start one background ``read()`` of the entry (stamped before
        it, as any read), ``RENEW_AFTER_S`` later (after the request's own critical path):
        the entry answers meanwhile, and what is kept is never older than the TTL. A failed
        renewal is dropped: the entry expires, and the next miss reads."""
        key = (tenant_id, tier)
        entry = self._entries.get(key)
        if (entry is None or self._renewals.running(key)
                or self.clock() - entry.read_at < self.ttl_s / 2):
            return

        async def renew() -> None:
            stamp = self.stamp(tenant_id)
            self.store(tenant_id, tier, await read(), stamp)

        self._renewals.run(key, renew, after_s=self.renew_after_s)

    def observe(self, tenant_id: uuid.UUID, generation: int) -> None:
        seen = self._seen.get(tenant_id)
        self._seen[tenant_id] = generation if seen is None else max(seen, generation)

    def drop(self, tenant_id: uuid.UUID, tier: str) -> None:
        self._entries.pop((tenant_id, tier), None)


def policy_cache(state: Any) -> PolicyCache:
    """One per app, made on first use."""
    cache: PolicyCache | None = getattr(state, "policy_cache", None)
    if cache is None:
        cache = state.policy_cache = PolicyCache()
    return cache


async def bump_policy_generation(redis: Redis, tenant_ids: Iterable[uuid.UUID]) -> None:
    """Call after the commit of an admin write that changes these tenants' policies. Redis
    away: the change reaches cached policies within ``POLICY_CACHE_TTL_S`` instead (logged)."""
    ids = list(tenant_ids)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for tenant_id in ids:
                pipe.incr(TenantKeys(str(tenant_id)).policy_generation)
            await pipe.execute()
    except RedisError:
        log.warning("policy generation of %d tenant(s) not bumped (Redis away): the change "
                    "reaches cached policies within %.0f s", len(ids), POLICY_CACHE_TTL_S)
