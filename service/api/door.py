"""What every route that creates a job does at the door, in order: an unattainable deadline
is a 400 before any quota is taken; the tenant's policy says which service tier the request
runs with (or 403); the request is classified (realtime, flex, or a background response);
realtime that cannot start within its target is refused now (service.api.slo_gate), before
the quota script runs, so a refusal under overload costs no quota and no Redis round trip;
then the tenant's quotas admit the request (or its 429 is counted), and in the same Redis call
a realtime request is placed on the worker of the model's next express ticket, its hand-off
sent (service.jobs.express); then the gate counts it. The policy comes from this process's
cache when the policy generation read with the quota script says it is current
(service.quotas.policy_cache); what a cached policy would refuse before the quota script is
judged again from a fresh read."""

from __future__ import annotations

import datetime as dt
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache
from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.api.slo_gate import SloGate, check_deadline
from service.jobs.express import Ticket, decode_ticket, door_entry
from service.jobs.tiers import Classification, classify, classify_background
from service.observability.requests import record_refusal
from service.quotas.admission import (
    Admission,
    DoorPolicy,
    StalePolicy,
    door_policy,
    estimate_prompt_tokens,
    quota_store,
    reserve_request,
)
from service.quotas.policy import TenantPolicy, load_policy, resolve_service_tier
from service.quotas.policy_cache import PolicyCache, policy_cache
from service.store import tracing
from service.store.db import without_transaction
from service.store.models.jobs import JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.store.telemetry.state import record_rejection
from service.web.errors import APIError

# How long a tenant's policy read at the door may refuse (never admit) later requests: an
# admin's change to a tier's TTFT target reaches refusals within this long.
HINT_TTL_S = 2.0
HINT_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Admitted:
    admission: Admission
    classification: Classification
    now: dt.datetime
    # The express ticket the job was placed with at admission, its hand-off sent: the caller
    # inserts the job assigned to that worker (``express_for``, ``create_job(express=...)``).
    ticket: Ticket | None = None


@tracing.traced("fairway.api.door")
async def admit(request: Request, session: AsyncSession, settings: Settings, tenant: Tenant, *,
                model: str, endpoint: str, payload: dict[str, Any], max_tokens: int,
                deadline_ms: int | None, background: bool = False) -> Admitted:
    prompt_tokens = estimate_prompt_tokens(payload)  # once: it serializes the whole prompt
    if deadline_ms is not None:  # one no load can help: a 400, before any quota is taken
        await check_deadline(request.app.state.slo_gate, model, deadline_ms=deadline_ms,
                             prompt_tokens=prompt_tokens)
    gate: SloGate = request.app.state.slo_gate
    hints, hint_key = _hints(request.app.state), (tenant.id, tenant.tier,
                                                   payload.get("service_tier"))
    now = dt.datetime.now(dt.UTC)
    hint = hints.get(hint_key)
    if hint is not None and not background and settings.api.slo_admission:
        # Under overload most requests are refused, and the fastest refusal reads nothing:
        # judged by this tenant's policy as read moments ago (HINT_TTL_S), it is refused
        # before any Postgres or quota round trip (issue #14: refusals in < 50 ms). An
        # admission is never taken from the hint: it takes the policy below (cached and
        # checked against the policy generation, or read; service.quotas.policy_cache).
        classification = _classify(hint, deadline_ms, now, settings, background)
        if classification.kind == JobKind.REALTIME:
            this = DoorPolicy(hint.policy, hint.service_tier, prompt_tokens)
            await _admit_by_slo(gate, this, model, classification, now, tenant, count=False)
    await without_transaction(session)
    policies = policy_cache(request.app.state)
    cached = policies.get(tenant.id, tenant.tier)
    if cached is not None:
        policies.renew_ahead(tenant.id, tenant.tier, lambda: _read_policy_apart(
            request.app.state.sessionmaker, tenant.id, tenant.tier))
        service_tier = resolve_service_tier(payload.get("service_tier"),
                                            cached.policy.allowed_service_tiers)
        if service_tier is not None:  # else its 403 is judged from a fresh read
            door = DoorPolicy(cached.policy, service_tier, prompt_tokens)
            hints[hint_key] = door
            try:
                return await _admit_with(request, session, settings, tenant, door, policies,
                                         model=model, endpoint=endpoint, payload=payload,
                                         max_tokens=max_tokens,
                                         deadline_ms=deadline_ms, now=now,
                                         background=background, expect=cached.generation)
            except StalePolicy:
                pass
        policies.drop(tenant.id, tenant.tier)
    stamp = policies.stamp(tenant.id)  # before the read: a change during it leaves it stale
    try:
        door = await door_policy(session, tenant=tenant, body=payload,
                                 prompt_tokens=prompt_tokens)
    except APIError as exc:
        record_refusal(tenant.id, exc)
        raise
    policies.store(tenant.id, tenant.tier, door.policy, stamp)
    hints[hint_key] = door
    return await _admit_with(request, session, settings, tenant, door, policies, model=model,
                             endpoint=endpoint, payload=payload, max_tokens=max_tokens,
                             deadline_ms=deadline_ms, now=now, background=background)


async def _admit_with(request: Request, session: AsyncSession, settings: Settings,
                      tenant: Tenant, door: DoorPolicy, policies: PolicyCache, *, model: str,
                      endpoint: str, payload: dict[str, Any], max_tokens: int,
                      deadline_ms: int | None, now: dt.datetime, background: bool,
                      expect: int | None = None) -> Admitted:
    """The door's checks with the tenant's policy ``door``: read just now, or (``expect``,
    the generation it was read under) cached, when what it alone would refuse before the
    quota script raises StalePolicy instead, to be judged again from a fresh read."""
    gate: SloGate = request.app.state.slo_gate
    classification = _classify(door, deadline_ms, now, settings, background)
    # The SLO gate before the quota script: a refusal takes no quota and costs no Redis.
    # That first look counts nothing: a request its quota then refuses (a tenant bursting
    # past its own rate limit) must not make the pool look busier to anyone else.
    gated = classification.kind == JobKind.REALTIME and settings.api.slo_admission
    if gated:
        try:
            await _admit_by_slo(gate, door, model, classification, now, tenant, count=False,
                                record=expect is None)
        except APIError:
            if expect is not None:
                raise StalePolicy() from None
            raise
    job_id = uuid.uuid4()
    express = (classification.kind == JobKind.REALTIME and not background
               and settings.dispatcher.express_tickets >= 1)
    try:
        with (tracing.span("fairway.api.handoff", attributes={"fairway.job_id": str(job_id)})
              if express else nullcontext()) as span:
            admission = await reserve_request(
                session, quota_store(request.app.state), tenant=tenant, door=door,
                max_tokens=max_tokens, policies=policies, expect=expect, ticket=job_id,
                slot_ttl_s=settings.api.request_timeout_seconds + 60,
                express=door_entry(model, job_id, endpoint=endpoint, request=payload,
                                   max_tokens=max_tokens, priority=classification.priority,
                                   tenant_id=tenant.id) if express else None)
    except APIError as exc:  # refused, or stale (judged again)
        record_refusal(tenant.id, exc)
        raise
    placed = decode_ticket(admission.express_ticket)
    if span is not None and placed is not None:
        span.set_attribute("fairway.worker_id", placed.worker_id)
    if gated and placed is not None:
        # Placed on a lent ticket, its hand-off sent: the lender saw the model's queue empty
        # and that worker with room, so the gate only counts it (a refusal now would leave
        # the worker an entry whose row never comes).
        gate.count(model, str(tenant.id))
    elif gated:
        # The admission itself, counted: with the outlook cached this check and its count
        # run without yielding, so a burst admitted by the quota at once is still counted
        # one by one. Refused here (the pool filled while the quota answered), the request
        # gets its tokens back.
        try:
            await _admit_by_slo(gate, door, model, classification, now, tenant)
        except BaseException:
            await admission.refund()
            raise
    return Admitted(admission, classification, now, placed)


async def _read_policy_apart(sessions: async_sessionmaker[AsyncSession], tenant_id: uuid.UUID,
                             tier: str) -> TenantPolicy:
    """The tenant's policy read in a session of its own (a background renewal)."""
    async with sessions() as session:
        return await load_policy(session, tenant_id=tenant_id, tier=tier)


def _hints(state: Any) -> TTLCache[Any, DoorPolicy]:
    """This process's recent door policies per (tenant, tier, requested service tier)."""
    hints: TTLCache[Any, DoorPolicy] | None = getattr(state, "door_hints", None)
    if hints is None:
        hints = state.door_hints = TTLCache(maxsize=HINT_MAX, ttl=HINT_TTL_S)
    return hints


def _classify(door: DoorPolicy, deadline_ms: int | None, now: dt.datetime, settings: Settings,
              background: bool) -> Classification:
    if background:
        return classify_background(deadline_ms, now=now,
                                   flex_deadline_s=settings.api.flex_deadline_seconds)
    return classify(door.service_tier, deadline_ms, now=now,
                    realtime_deadline_s=settings.api.realtime_deadline_seconds,
                    flex_deadline_s=settings.api.flex_deadline_seconds)


def _target_s(classification: Classification, ttft_target_s: float, now: dt.datetime) -> float:
    """What the request is judged by: realtime, its time to first token against its tier's
    target (or its deadline if sooner); flex, the whole answer against its deadline."""
    deadline_s = (classification.deadline_at - now).total_seconds()
    if classification.kind == JobKind.REALTIME:
        return min(ttft_target_s, deadline_s)
    return deadline_s


async def _admit_by_slo(gate: SloGate, door: DoorPolicy, model: str,
                        classification: Classification, now: dt.datetime,
                        tenant: Tenant, count: bool = True, record: bool = True) -> None:
    """Refuse now what cannot start within its target (service.api.slo_gate). ``record``:
    count the refusal (not when a fresh read judges it again)."""
    target = _target_s(classification, door.ttft_target_s, now)
    retry = await gate.check(model, prompt_tokens=door.prompt_estimate, target_s=target,
                             count=count, tenant=str(tenant.id), weight=tenant.weight)
    if retry is None:
        return
    if record:
        record_rejection(tenant.id, "slo_unattainable")
    raise APIError(429, f"The service is too busy to start this request within its "
                        f"{target:g} s time-to-first-token target; retry in {retry} s.",
                   code="slo_unattainable", headers={"Retry-After": str(retry)},
                   reason="slo_unattainable")
