"""What the door knows of a request before it takes any quota (``DoorPolicy``), and where it
gets it (``DoorPolicies``): a hint read moments ago, which may only refuse; this process's
cache of tenants' policies (``PolicyCache``), trusted while the tenant's policy generation is
unchanged, so an admission reads no Postgres (the policy read was one of the realtime path's
serial round trips); or a read of Postgres.

An admin's change must still bind the tenant's very next call on every API process. So every
admin write that changes a policy bumps the tenant's policy generation in Redis after its
commit (``bump_policy_generation``; a plan's change bumps every tenant on it), and the quota
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
request every few seconds is never read on its request's path (every other request of an
idle-paced client paid the read; bench/idle_ttft_pairs.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from cachetools import LRUCache, TTLCache
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.jobs.door_request import DoorRequest
from service.quotas.policy import TenantPolicy, load_policy, resolve_service_tier
from service.store.quota_store import TenantKeys
from service.store.single_flight import RENEW_AFTER_S, SingleFlight, renew_delay
from service.web.errors import APIError

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

    def get(self, tenant_id: uuid.UUID, plan: str) -> CachedPolicy | None:
        return self._entries.get((tenant_id, plan))

    def stamp(self, tenant_id: uuid.UUID) -> int | None:
        """The generation to stamp on a policy of ``tenant_id`` read from now: None before any
        is known (such a read is not cached)."""
        return self._seen.get(tenant_id)

    def store(self, tenant_id: uuid.UUID, plan: str, policy: TenantPolicy,
              stamp: int | None) -> None:
        if stamp is not None:
            self._entries[(tenant_id, plan)] = CachedPolicy(policy, stamp, self.clock())

    def renew_ahead(self, tenant_id: uuid.UUID, plan: str,
                    read: Callable[[], Awaitable[TenantPolicy]]) -> None:
        """Past half its TTL, start one background ``read()`` of the entry (stamped before
        it, as any read), ``RENEW_AFTER_S`` later (after the request's own critical path):
        the entry answers meanwhile, and what is kept is never older than the TTL. A failed
        renewal is dropped: the entry expires, and the next miss reads."""
        key = (tenant_id, plan)
        entry = self._entries.get(key)
        if (entry is None or self._renewals.running(key)
                or self.clock() - entry.read_at < self.ttl_s / 2):
            return

        async def renew() -> None:
            stamp = self.stamp(tenant_id)
            self.store(tenant_id, plan, await read(), stamp)

        self._renewals.run(key, renew, after_s=self.renew_after_s)

    def observe(self, tenant_id: uuid.UUID, generation: int) -> None:
        seen = self._seen.get(tenant_id)
        self._seen[tenant_id] = generation if seen is None else max(seen, generation)

    def drop(self, tenant_id: uuid.UUID, plan: str) -> None:
        self._entries.pop((tenant_id, plan), None)


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


# How long a tenant's policy read at the door may refuse (never admit) later requests: an
# admin's change to a plan's TTFT target reaches refusals within this long and one read.
HINT_TTL_S = 2.0
# Past HINT_TTL_S, and up to this old, a hint still refuses while one background read renews
# it: a refusal that waited on that read in a burst waited behind the whole burst (a 400-stream
# burst: refusals p50 133 ms in the API, every one of them on the policy read).
HINT_STALE_S = POLICY_CACHE_TTL_S
HINT_MAX = 10_000


@dataclass(frozen=True, slots=True)
class DoorPolicy:
    """The tenant's limits and targets, and the service tier the request runs with.
    ``generation``: the policy generation a cached policy was read under (the quota script
    takes nothing if it is no longer current); None for a policy read just now."""
    policy: TenantPolicy
    service_tier: str
    generation: int | None = None

    @property
    def ttft_target_s(self) -> float:
        return self.policy.ttft_slo_ms / 1000

    @property
    def cached(self) -> bool:
        return self.generation is not None


def not_allowed(requested: object, policy: TenantPolicy) -> APIError:
    return APIError(403, f"service_tier '{requested}' is not available on the "
                         f"'{policy.plan}' plan.", code="service_tier_not_allowed",
                    param="service_tier", reason="service_tier_not_allowed")


async def read_door_policy(session: AsyncSession, req: DoorRequest) -> DoorPolicy:
    """The tenant's policy read from Postgres, and the request's service tier, or the 403 for
    a service tier its plan does not allow. A request refused after this (by its SLO) cost no
    quota."""
    tenant = req.tenant
    policy = await load_policy(session, tenant_id=tenant.id, plan=tenant.plan)
    service_tier = resolve_service_tier(req.requested_service_tier,
                                        policy.allowed_service_tiers)
    if service_tier is None:
        raise not_allowed(req.payload.get("service_tier"), policy)
    return DoorPolicy(policy, service_tier)


HintKey = tuple[uuid.UUID, str, str | None]
K = TypeVar("K", bound=Hashable)
FRESH_READ_TASK = "fairway-policy-read"  # a shared read on requests' path (not a renewal)
REHINT_TASK = "fairway-policy-rehint"  # a stale hint's renewal, off every request's path


class DoorPolicies:
    """The door's three sources of a tenant's policy, fastest first."""

    def __init__(self, cache: PolicyCache, sessions: async_sessionmaker[AsyncSession],
                 hint_ttl_s: float = HINT_TTL_S, hint_stale_s: float = HINT_STALE_S) -> None:
        self.cache = cache
        self._sessions = sessions
        self._hint_ttl_s = hint_ttl_s
        # hint key -> (the cache's clock when its policy was read, the policy)
        self._hints: TTLCache[HintKey, tuple[float, DoorPolicy]] = TTLCache(
            maxsize=HINT_MAX, ttl=max(hint_ttl_s, hint_stale_s), timer=cache.clock)
        # (plan, service tier asked) -> the newest hint of any tenant on the plan: what the
        # door judges by (targets, admission mode, service tiers) is the plan's, not the
        # tenant's (its quota overrides change only limits), so a tenant the process has not
        # seen lately is refused on it too.
        self._plan_hints: TTLCache[tuple[str, str | None], tuple[float, DoorPolicy]] = TTLCache(
            maxsize=HINT_MAX, ttl=max(hint_ttl_s, hint_stale_s), timer=cache.clock)
        self._fresh: SingleFlight[tuple[uuid.UUID, str], TenantPolicy] = SingleFlight()
        self._rehints: SingleFlight[HintKey, None] = SingleFlight()

    def hint(self, req: DoorRequest) -> DoorPolicy | None:
        """The policy this tenant's last request with the same service tier was judged by,
        or else its cached policy, or else another tenant's on its plan: enough to refuse
        under overload without any round trip, never to admit. Read within HINT_TTL_S, as
        is; older (up to HINT_STALE_S), as is while one background read of this tenant's
        renews it (no request waits on that read)."""
        key = _hint_key(req)
        found = self._hints.get(key)
        if found is None or self._old(found[0]):
            self.cached(req)  # hints the cached policy if it was read since (renewed)
            found = self._hints.get(key)
        if found is None:
            found = self._plan_hints.get((req.tenant.plan, req.requested_service_tier))
            if found is None:
                return None
        read_at, door = found
        if self._old(read_at):
            self._rehints.run(key, lambda: self._rehint(req), name=REHINT_TASK)
        return door

    def _old(self, read_at: float) -> bool:
        return self.cache.clock() - read_at >= self._hint_ttl_s

    def cached(self, req: DoorRequest) -> DoorPolicy | None:
        """The cached policy, renewed in the background past half its life; None when there
        is none, or when the request's service tier is one it refuses (its 403 is judged
        from a fresh read)."""
        tenant = req.tenant
        entry = self.cache.get(tenant.id, tenant.plan)
        if entry is None:
            return None
        self.cache.renew_ahead(tenant.id, tenant.plan,
                               lambda: self._read_apart(tenant.id, tenant.plan))
        service_tier = resolve_service_tier(req.requested_service_tier,
                                            entry.policy.allowed_service_tiers)
        if service_tier is None:
            return None
        return self._hinted(req, DoorPolicy(entry.policy, service_tier, entry.generation),
                            entry.read_at)

    async def read(self, session: AsyncSession, req: DoorRequest) -> DoorPolicy:
        """A fresh read, cached under the generation this process saw before it (a change
        that commits during the read leaves it stale, never trusted); or the 403.

        Requests of the tenant that come while its read is under way share that read (in a
        session of its own), as a key's lookup is shared: a cold burst of hundreds would
        otherwise send one query each and stand in line for the pool's connections, the
        refusals among them too. A shared read began at most a round trip before the request
        came; an admin change committed in between is caught by the quota script's
        generation check, which reads again."""
        return await self._read(req, FRESH_READ_TASK)

    async def _read(self, req: DoorRequest, task_name: str) -> DoorPolicy:
        tenant = req.tenant
        policy = await self._fresh.run((tenant.id, tenant.plan),
                                       lambda: self._read_and_cache(tenant.id, tenant.plan),
                                       name=task_name)
        service_tier = resolve_service_tier(req.requested_service_tier,
                                            policy.allowed_service_tiers)
        if service_tier is None:
            raise not_allowed(req.payload.get("service_tier"), policy)
        return self._hinted(req, DoorPolicy(policy, service_tier), self.cache.clock())

    async def _rehint(self, req: DoorRequest) -> None:
        """Renew a stale hint (``read`` hints what it reads). A service tier the plan no
        longer allows drops it and the plan's: the next request reads, and gets its 403."""
        try:
            await self._read(req, REHINT_TASK)
        except APIError:
            self._hints.pop(_hint_key(req), None)
            self._plan_hints.pop((req.tenant.plan, req.requested_service_tier), None)

    async def _read_and_cache(self, tenant_id: uuid.UUID, plan: str) -> TenantPolicy:
        self.cache.drop(tenant_id, plan)
        stamp = self.cache.stamp(tenant_id)
        policy = await self._read_apart(tenant_id, plan)
        self.cache.store(tenant_id, plan, policy, stamp)
        return policy

    def observe(self, tenant_id: uuid.UUID, generation: int) -> None:
        """The tenant's policy generation, as an admission's quota script read it."""
        self.cache.observe(tenant_id, generation)

    def _hinted(self, req: DoorRequest, door: DoorPolicy, read_at: float) -> DoorPolicy:
        """Hint ``door``, read at ``read_at``, unless a hint read since is kept already."""
        _keep_newest(self._hints, _hint_key(req), read_at, door)
        _keep_newest(self._plan_hints, (req.tenant.plan, req.requested_service_tier), read_at,
                     door)
        return door

    async def _read_apart(self, tenant_id: uuid.UUID, plan: str) -> TenantPolicy:
        """A background renewal's read, in a session of its own."""
        async with self._sessions() as session:
            return await load_policy(session, tenant_id=tenant_id, plan=plan)


def _keep_newest(hints: TTLCache[K, tuple[float, DoorPolicy]], key: K, read_at: float,
                 door: DoorPolicy) -> None:
    kept = hints.get(key)
    if kept is None or kept[0] <= read_at:
        hints[key] = (read_at, door)


def _hint_key(req: DoorRequest) -> HintKey:
    return req.tenant.id, req.tenant.plan, req.requested_service_tier
