"""Admission at the door: quota checks for one realtime request, and the ticket that holds them.

Flow: admit (reserve prompt estimate + max_tokens, take a concurrency slot) -> guard the job
insert (re-key the reservation to the job id) -> the worker settles the reservation with real
usage at job end -> release when the HTTP request ends (frees the slot; if the worker never
settled, e.g. the client left and the job was cancelled, charge the prompt estimate only).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import JSONResponse

from service.jobs.door_request import DoorRequest
from service.quotas.door_policy import DoorPolicies, DoorPolicy, read_door_policy
from service.quotas.headers import rate_limit_headers
from service.quotas.held import release_after, release_when_done
from service.quotas.policy import TenantPolicy
from service.quotas.refusal import refusal
from service.store.detached import run_detached
from service.store.handoff import ExpressEntry
from service.store.job_queries import prompt_estimate
from service.store.outages import is_outage
from service.store.quota_store import Decision, QuotaStore
from service.usage.reports import month_tokens_used
from service.web.errors import APIError

log = logging.getLogger("fairway.quotas")
T = TypeVar("T")
RELEASE_RETRY_S = 0.5  # the first retry of a release that met a Redis outage

# The same rough estimate the dispatcher's policy uses (one formula for both).
estimate_prompt_tokens = prompt_estimate


def unavailable() -> APIError:
    # Fail closed: without Redis we can't count, and an uncounted door is an open door.
    return APIError(503, "Quota service unavailable; retry shortly.", code="quota_unavailable",
                    headers={"Retry-After": "1"}, reason="quota_unavailable")


@dataclass(frozen=True, slots=True)
class QuotaAsk:
    """What one admission asks of a tenant's quotas (the arguments of ``QuotaStore.admit``)."""
    tenant_id: uuid.UUID
    policy: TenantPolicy
    tokens: int  # the prompt estimate plus max_tokens (a request), or the lines' (a batch)
    ticket: uuid.UUID  # the reservation's id: the job's (a request) or the batch's
    batch: bool
    hold_slot: bool  # take a concurrency slot until the request ends
    slot_ttl_s: float
    # The tenant's policy generation ``policy`` was read under; another one makes the
    # decision ``stale``, with nothing taken (service.quotas.door_policy).
    expect_generation: int | None = None
    # On an admission, also place the job on the worker of the model's next lent ticket and
    # add its hand-off entry there, in the same call (``Decision.express_ticket``).
    express: ExpressEntry | None = None


async def reserve(store: QuotaStore, session: AsyncSession, ask: QuotaAsk) -> Decision:
    """Run the admission script, seeding the month counter from Postgres when it's missing
    (a stale decision is returned as is)."""
    for _ in range(2):
        decision = await store.admit(
            tenant_id=ask.tenant_id, limits=ask.policy.limits, tokens=ask.tokens,
            ticket=ask.ticket, batch=ask.batch, hold_slot=ask.hold_slot,
            slot_ttl_s=ask.slot_ttl_s, expect_generation=ask.expect_generation,
            express=ask.express)
        if not decision.needs_seed:
            if decision.alert_crossed:
                log.warning("tenant passed its monthly token alert level",
                            extra={"tenant_id": str(ask.tenant_id)})
            return decision
        used = await month_tokens_used(session, tenant_id=ask.tenant_id)
        await store.seed_month(tenant_id=ask.tenant_id, used_tokens=used)
    raise unavailable()


@dataclass(slots=True)
class Admission:
    store: QuotaStore
    tenant_id: uuid.UUID
    ticket: uuid.UUID
    prompt_estimate: int
    service_tier: str
    ttft_target_s: float  # the tenant's plan's time-to-first-token target
    headers: dict[str, str] = field(default_factory=dict)  # x-ratelimit-* for the response
    job_id: uuid.UUID | None = None
    slot_ttl_s: float = 660.0  # how long the slot lives if never released
    tpot_target_s: float | None = None  # the tenant's plan's time-per-output-token target
    max_wait_s: float | None = None  # the plan's queue wait budget (None: it sheds)
    # The express ticket the admission placed the job with, its hand-off already sent
    # (``reserve_request(express=...)``); None: the job goes the dispatcher's way.
    express_ticket: str | None = None
    _released: bool = field(default=False)

    async def guard(self, create: Awaitable[T]) -> T:
        """Await the job insert, or give the reservation back. The job is created under the
        ticket's id (``create_job(job_id=ticket)``), so the reservation already names it."""
        try:
            job = await create
        except BaseException:
            await self.release()
            raise
        self.job_id = job.id  # type: ignore[attr-defined]
        return job

    async def release(self) -> None:
        await self._give_back(self.prompt_estimate)

    def settled_by_worker(self) -> None:
        """The job's final stream entry says its worker settled the reservation (and so freed
        its concurrency slot): the release at the request's end has nothing left to do."""
        self._released = True

    async def refund(self) -> None:
        """Give the whole reservation back: refused after the quota took it (the request
        still counts against requests per minute, which the quota script already took)."""
        await self._give_back(0)

    async def _give_back(self, tokens: int) -> None:
        if self._released:
            return
        self._released = True
        try:
            await self._settle(tokens)
        except RedisError as exc:
            if not is_outage(exc):  # the slot's expiry score frees it later
                log.warning("quota release failed", extra={"tenant_id": str(self.tenant_id)})
                return
            # Redis is away: keep trying in the background, or the tenant's concurrency slot
            # stays taken until its expiry (the request timeout plus a minute).
            run_detached(self._release_when_back(tokens))

    async def detach(self) -> None:
        """The request ends before its job does (a background response): free the
        concurrency slot now, and leave the reservation to the worker's settle at the job's
        end (or a cancel's, or its expiry), so the job is charged its real tokens."""
        if self._released:
            return
        self._released = True
        try:
            await self.store.release_slot(tenant_id=self.tenant_id, ticket=self.ticket)
        except RedisError:  # the slot's expiry score frees it later
            log.warning("quota slot release failed", extra={"tenant_id": str(self.tenant_id)})

    async def _settle(self, tokens: int) -> None:
        await self.store.settle(tenant_id=self.tenant_id, ref=self.job_id or self.ticket,
                                actual_tokens=tokens, free_slot=self.ticket)

    async def _release_when_back(self, tokens: int) -> None:
        """Retry the release through a Redis outage (backing off to 5 s between tries) for as
        long as the slot would otherwise live."""
        deadline = time.monotonic() + self.slot_ttl_s
        delay = RELEASE_RETRY_S
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            try:
                await self._settle(tokens)
                return
            except RedisError as exc:
                if not is_outage(exc):
                    break
            delay = min(5.0, delay * 2)
        log.warning("quota release failed", extra={"tenant_id": str(self.tenant_id)})

    async def around(self, work: Awaitable[T]) -> T:
        return await release_after(work, self.release)

    def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return release_when_done(stream, self.release)


def quota_store(state: Any) -> QuotaStore:
    """One QuotaStore per app, made on first use (it holds the registered scripts)."""
    store: QuotaStore | None = getattr(state, "quota_store", None)
    if store is None or store.redis is not state.redis:
        store = state.quota_store = QuotaStore(state.redis)
    return store


@dataclass(frozen=True, slots=True)
class StalePolicy:
    """The quota script found the tenant's policy generation moved on from the cached
    policy's: nothing was taken, and the door judges the request again from a fresh read."""
    generation: int


class RequestQuotas:
    """The door's quota step: one realtime request's tokens and concurrency slot, taken or
    refused (429/503) in one script call that also reports the tenant's policy generation."""

    def __init__(self, store: QuotaStore, policies: DoorPolicies | None = None) -> None:
        self.store = store
        self._policies = policies

    async def reserve(self, session: AsyncSession, ask: QuotaAsk, door: DoorPolicy,
                      prompt_estimate: int) -> Admission | StalePolicy:
        """The Admission holding what was taken, StalePolicy when ``door`` was cached under
        a generation that is no longer current, or the refusal's APIError."""
        try:
            decision = await reserve(self.store, session, ask)
        except RedisError as exc:
            raise unavailable() from exc
        if self._policies is not None:
            self._policies.observe(ask.tenant_id, decision.generation)
        if decision.stale:
            return StalePolicy(decision.generation)
        if not decision.admitted:
            raise refusal(decision, ask.policy.limits, requested=ask.tokens)
        return Admission(self.store, ask.tenant_id, ask.ticket, prompt_estimate,
                         door.service_tier, door.ttft_target_s,
                         rate_limit_headers(ask.policy.limits, decision),
                         slot_ttl_s=ask.slot_ttl_s,
                         tpot_target_s=door.policy.tpot_slo_ms / 1000,
                         max_wait_s=door.policy.max_wait_s,
                         express_ticket=decision.express_ticket)


async def admit_request(session: AsyncSession, store: QuotaStore, *, tenant: Any,
                        body: dict[str, Any], max_tokens: int, slot_ttl_s: float
                        ) -> Admission:
    """Admit one realtime-API request on a fresh policy read (no door, no SLO gate), or
    raise the APIError the client should see: the quota step alone, for its tests and
    bench/admission_overhead.py."""
    req = DoorRequest(tenant, None, str(body.get("model", "")), "chat.completions", body,
                      max_tokens, None)
    door = await read_door_policy(session, req)
    ask = QuotaAsk(tenant.id, door.policy, req.prompt_tokens + max_tokens, uuid.uuid4(),
                   batch=False, hold_slot=True, slot_ttl_s=slot_ttl_s)
    admitted = await RequestQuotas(store).reserve(session, ask, door, req.prompt_tokens)
    if isinstance(admitted, StalePolicy):  # unreachable: no generation was expected
        raise unavailable()
    return admitted


def install_redis_unavailable_handler(app: Any) -> None:
    """Any Redis outage that escapes a route (model catalog, admission) answers 503, not 500:
    realtime admission fails closed, and the client is told to retry."""
    async def _handler(_: Request, exc: Exception) -> JSONResponse:
        err = unavailable()
        return JSONResponse(status_code=err.status, content=err.body(), headers=err.headers)

    app.add_exception_handler(RedisConnectionError, _handler)
    app.add_exception_handler(RedisTimeoutError, _handler)
