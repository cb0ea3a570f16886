"""Tenant, key and quota-override operations for the admin API. Each one writes its audit
entry in the same transaction; the route commits."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import audit
from service.admin.key_ops import apply_policy, policy_view
from service.admin.schemas import quota_view
from service.batches.batch_records import cancel_tenant_batches
from service.store import job_stream, lifecycle, wakeups
from service.store.keys import stream_key
from service.store.models.batches import BATCH_PREFIX
from service.store.models.jobs import Job
from service.store.models.plans import Plan
from service.store.models.quotas import TenantQuota
from service.store.models.tenants import ApiKey, Tenant
from service.store.response_events import record_response_end_async
from service.tenants.keys import display_prefix, generate_key, hash_key
from service.web.errors import APIError


def _ts(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def tenant_view(t: Tenant, *, active_keys: int | None = None) -> dict[str, Any]:
    return {"id": str(t.id), "name": t.name, "tier": t.plan, "weight": t.weight,
            "suspended": t.suspended_at is not None, "suspended_at": _ts(t.suspended_at),
            "created_at": _ts(t.created_at), "active_keys": active_keys}


def key_view(k: ApiKey) -> dict[str, Any]:
    return {"id": str(k.id), "name": k.name, "prefix": k.prefix, "created_at": _ts(k.created_at),
            "last_used_at": _ts(k.last_used_at), "expires_at": _ts(k.expires_at),
            "revoked_at": _ts(k.revoked_at), **policy_view(k)}


async def _plan(session: AsyncSession, name: str) -> Plan:
    plan = await session.get(Plan, name)
    if plan is None:  # param: the API's field, still named tier
        raise APIError(400, f"No plan named '{name}'.", code="invalid_value", param="tier")
    return plan


async def require_tenant(session: AsyncSession, tenant_id: str) -> Tenant:
    try:
        tenant = await session.get(Tenant, uuid.UUID(tenant_id))
    except ValueError:
        tenant = None
    if tenant is None:
        raise APIError(404, f"No tenant with id '{tenant_id}'.", code="not_found")
    return tenant


async def list_tenants(session: AsyncSession) -> list[dict[str, Any]]:
    live = (ApiKey.revoked_at.is_(None)) & (
        ApiKey.expires_at.is_(None) | (ApiKey.expires_at > func.now()))
    counts = dict((await session.execute(
        select(ApiKey.tenant_id, func.count()).where(live).group_by(ApiKey.tenant_id))).all())
    tenants = (await session.scalars(select(Tenant).order_by(Tenant.name))).all()
    return [tenant_view(t, active_keys=counts.get(t.id, 0)) for t in tenants]


async def create_tenant(session: AsyncSession, *, actor: str, name: str, plan: str) -> Tenant:
    plan_row = await _plan(session, plan)
    if await session.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise APIError(409, f"A tenant named '{name}' exists.", code="conflict", param="name")
    tenant = Tenant(name=name, plan=plan, weight=plan_row.weight)
    session.add(tenant)
    await session.flush()
    audit.record(session, actor=actor, action="tenant.create", target_type="tenant",
                 target_id=str(tenant.id), details={"name": name, "tier": plan})
    return tenant


# What a suspended tenant's cancelled requests end with (the job row and its event stream).
SUSPENDED = job_stream.Failure(0, 403, "tenant_suspended",
                               "The request was cancelled: its tenant was suspended.")
SUSPENDED_ERROR = {"code": SUSPENDED.code, "status": SUSPENDED.status,
                   "message": SUSPENDED.message}


async def update_tenant(session: AsyncSession, *, actor: str, tenant: Tenant,
                        plan: str | None, suspended: bool | None
                        ) -> tuple[Tenant, list[uuid.UUID]]:
    """Returns the tenant and the realtime jobs a suspension cancelled (the route tells their
    waiting requests after the commit, see `tell_cancelled`)."""
    cancelled_jobs: list[uuid.UUID] = []
    if plan is not None and plan != tenant.plan:
        plan_row = await _plan(session, plan)
        # The audit log keeps the action's first name, which older entries carry.
        audit.record(session, actor=actor, action="tenant.tier_change", target_type="tenant",
                     target_id=str(tenant.id), details={"from": tenant.plan, "to": plan})
        tenant.plan, tenant.weight = plan, plan_row.weight
    if suspended is not None and suspended != (tenant.suspended_at is not None):
        # Takes effect on the next request: authentication reads suspended_at every time.
        tenant.suspended_at = dt.datetime.now(dt.UTC) if suspended else None
        details: dict[str, Any] = {}
        if suspended:
            cancelled_jobs, batches = await stop_queued_work(session, tenant_id=tenant.id)
            details = {"cancelled_jobs": len(cancelled_jobs),
                       "cancelled_batches": [BATCH_PREFIX + b.hex for b in batches]}
        audit.record(session, actor=actor,
                     action="tenant.suspend" if suspended else "tenant.unsuspend",
                     target_type="tenant", target_id=str(tenant.id), details=details)
    await session.flush()
    return tenant, cancelled_jobs


async def stop_queued_work(session: AsyncSession, *, tenant_id: uuid.UUID
                           ) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """A suspension stops what has not started: queued requests of the realtime API (every
    job outside a batch file: realtime, and flex, which runs at batch class) are cancelled
    (the dispatcher hears `cancel:<id>` for each and drops them), and open batches are cancelled
    as POST /v1/batches/{id}/cancel does (queued lines stop, running lines finish, the batch
    ends `cancelled` with its partial results). Jobs already on a worker run to their end.
    No commit: it lands with the suspension and its audit entry."""
    now = dt.datetime.now(dt.UTC)
    rows = (await session.execute(lifecycle.cancel(
        Job.tenant_id == tenant_id, Job.batch_id.is_(None), now=now, error=SUSPENDED_ERROR,
        only_queued=True))).all()
    for row in rows:  # background responses tell their webhooks, in this transaction
        await record_response_end_async(session, row)
    jobs = [row.id for row in rows]
    if jobs:  # delivered on commit, like every NOTIFY
        await session.execute(*wakeups.notify_all(wakeups.JobCancelled(j) for j in jobs))
    batches = await cancel_tenant_batches(session, tenant_id=tenant_id)
    return jobs, batches


async def tell_cancelled(redis: Redis, job_ids: list[uuid.UUID], *, ttl_s: int) -> None:
    """After the commit: end the HTTP requests still waiting on the cancelled jobs with the
    error (their event streams get the final `error` event a worker would have sent)."""
    if not job_ids:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            key = stream_key(job_id)
            pipe.xadd(key, job_stream.fields(SUSPENDED))
            pipe.expire(key, ttl_s)
        await pipe.execute()


async def delete_tenant(session: AsyncSession, *, actor: str, tenant: Tenant) -> None:
    audit.record(session, actor=actor, action="tenant.delete", target_type="tenant",
                 target_id=str(tenant.id), details={"name": tenant.name})
    await session.delete(tenant)


async def list_keys(session: AsyncSession, *, tenant: Tenant) -> list[dict[str, Any]]:
    keys = await session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id)
                                 .order_by(ApiKey.created_at))
    return [key_view(k) for k in keys.all()]


async def issue_key(session: AsyncSession, *, actor: str, tenant: Tenant, secret: str,
                    name: str, expires_at: dt.datetime | None,
                    policy: dict[str, Any] | None = None) -> tuple[ApiKey, str]:
    """The clear key is returned once and never stored or logged; the audit keeps the prefix.
    ``policy``: the key's own limits and models (service.admin.key_ops), already checked."""
    clear = generate_key()
    key = ApiKey(tenant_id=tenant.id, name=name, prefix=display_prefix(clear),
                 key_hash=hash_key(clear, secret), expires_at=expires_at)
    apply_policy(key, {k: v for k, v in (policy or {}).items() if k != "expires_at"})
    session.add(key)
    await session.flush()
    audit.record(session, actor=actor, action="key.issue", target_type="tenant",
                 target_id=str(tenant.id),
                 details={"key_id": str(key.id), "prefix": key.prefix, "name": name,
                          "expires_at": _ts(expires_at),
                          **{k: v for k, v in (policy or {}).items() if k != "expires_at"}})
    return key, clear


async def revoke_key(session: AsyncSession, *, actor: str, tenant: Tenant,
                     key_id: str) -> ApiKey:
    try:
        key = await session.get(ApiKey, uuid.UUID(key_id))
    except ValueError:
        key = None
    if key is None or key.tenant_id != tenant.id:
        raise APIError(404, f"No key with id '{key_id}'.", code="not_found")
    if key.revoked_at is None:
        key.revoked_at = dt.datetime.now(dt.UTC)
        audit.record(session, actor=actor, action="key.revoke", target_type="tenant",
                     target_id=str(tenant.id), details={"key_id": key_id, "prefix": key.prefix})
    await session.flush()
    return key


async def get_overrides(session: AsyncSession, *, tenant_id: uuid.UUID) -> dict[str, Any]:
    row = await session.get(TenantQuota, tenant_id)
    return dict(row.overrides) if row else {}


async def set_overrides(session: AsyncSession, *, actor: str, tenant: Tenant,
                        overrides: dict[str, Any]) -> dict[str, Any]:
    """Replace the tenant's overrides (validated by the caller). {} means "the plan's defaults"."""
    row = await session.get(TenantQuota, tenant.id)
    before = dict(row.overrides) if row else {}
    if row is None:
        row = TenantQuota(tenant_id=tenant.id, overrides=overrides)
        session.add(row)
    row.overrides = overrides
    row.updated_at = dt.datetime.now(dt.UTC)
    # The audit says "unlimited" where the admin API does, not null (stored None).
    audit.record(session, actor=actor, action="quota.update", target_type="tenant",
                 target_id=str(tenant.id),
                 details={"from": quota_view(before), "to": quota_view(overrides)})
    await session.flush()
    return overrides
