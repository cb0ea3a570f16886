"""Admin API: tenants, keys, plans, quotas. Thin routes over service functions; every change
commits together with its audit entry. Everything here needs the admin credential.

The tenant's plan is a "tier" on the wire: the routes (/admin/tiers), the JSON fields and the
audit actions keep that name, and so do the route functions (FastAPI makes the operationIds
from them), so clients written against the API keep working."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from redis.exceptions import RedisError

from service.admin import key_ops
from service.admin import tenant_ops as ops
from service.admin.audit import record
from service.admin.key_routes import router as key_router
from service.admin.schemas import (
    PLAN_NAME_MAX,
    KeyCreate,
    QuotaUpdate,
    TenantCreate,
    TenantUpdate,
    TierUpsert,
    quota_view,
)
from service.plans import plan_records
from service.plans.defaults import BUILTIN_PLANS
from service.quotas.door_policy import bump_policy_generation
from service.store.models.plans import Plan
from service.store.quota_limits import effective_limits
from service.store.quota_store import QuotaStore
from service.tenants.key_cache import key_cache
from service.usage.reports import month_tokens_used
from service.web.deps import AdminDep, RedisDep, SessionDep, SettingsDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, WITH_BODY, errors

log = logging.getLogger("fairway.admin")
router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                   responses=ADMIN_ROUTES)


@router.get("/tenants")
async def list_tenants(session: SessionDep) -> dict[str, Any]:
    return {"object": "list", "data": await ops.list_tenants(session)}


@router.post("/tenants", status_code=201, responses={**errors(409), **WITH_BODY})
async def create_tenant(body: TenantCreate, actor: AdminDep, session: SessionDep,
                        settings: SettingsDep) -> dict[str, Any]:
    tenant = await ops.create_tenant(session, actor=actor, name=body.name, plan=body.tier)
    out = ops.tenant_view(tenant)
    if body.issue_key:
        key, clear = await ops.issue_key(session, actor=actor, tenant=tenant,
                                         secret=settings.secret_key, name="default",
                                         expires_at=None)
        out["key"] = {**ops.key_view(key), "key": clear}  # shown once
    await session.commit()
    return out


@router.get("/tenants/{tenant_id}", responses=errors(404))
async def read_tenant(tenant_id: str, session: SessionDep) -> dict[str, Any]:
    return ops.tenant_view(await ops.require_tenant(session, tenant_id))


@router.patch("/tenants/{tenant_id}", responses={**errors(404), **WITH_BODY})
async def update_tenant(tenant_id: str, body: TenantUpdate, actor: AdminDep,
                        session: SessionDep, redis: RedisDep,
                        settings: SettingsDep, request: Request) -> dict[str, Any]:
    tenant, cancelled = await ops.update_tenant(
        session, actor=actor, tenant=await ops.require_tenant(session, tenant_id),
        plan=body.tier, suspended=body.suspended)
    await session.commit()
    key_cache(request.app.state).clear()  # here at once; other API processes within its TTL
    await bump_policy_generation(redis, [tenant.id])
    try:
        await ops.tell_cancelled(redis, cancelled, ttl_s=settings.jobs.stream_ttl_seconds)
    except RedisError:  # the waiting requests then end at their timeout
        log.warning("could not notify cancelled requests", extra={"tenant_id": tenant_id})
    return ops.tenant_view(tenant)


@router.delete("/tenants/{tenant_id}", responses=errors(404))
async def delete_tenant(tenant_id: str, actor: AdminDep, session: SessionDep,
                        request: Request) -> dict[str, Any]:
    await ops.delete_tenant(session, actor=actor,
                            tenant=await ops.require_tenant(session, tenant_id))
    await session.commit()
    key_cache(request.app.state).clear()
    return {"id": tenant_id, "deleted": True}


@router.get("/tenants/{tenant_id}/keys", responses=errors(404))
async def list_keys(tenant_id: str, session: SessionDep) -> dict[str, Any]:
    tenant = await ops.require_tenant(session, tenant_id)
    return {"object": "list", "data": await ops.list_keys(session, tenant=tenant)}


@router.post("/tenants/{tenant_id}/keys", status_code=201,
             responses={**errors(404), **WITH_BODY})
async def issue_key(tenant_id: str, body: KeyCreate, actor: AdminDep, session: SessionDep,
                    settings: SettingsDep) -> dict[str, Any]:
    tenant = await ops.require_tenant(session, tenant_id)
    policy = body.policy()
    await key_ops.check_within_tenant(session, tenant, policy)
    key, clear = await ops.issue_key(session, actor=actor, tenant=tenant,
                                     secret=settings.secret_key, name=body.name,
                                     expires_at=body.expires_at, policy=policy)
    await session.commit()
    return {**ops.key_view(key), "key": clear}  # the only time the clear key is ever sent


@router.delete("/tenants/{tenant_id}/keys/{key_id}", responses=errors(404))
async def revoke_key(tenant_id: str, key_id: str, actor: AdminDep,
                     session: SessionDep, request: Request) -> dict[str, Any]:
    tenant = await ops.require_tenant(session, tenant_id)
    key = await ops.revoke_key(session, actor=actor, tenant=tenant, key_id=key_id)
    await session.commit()
    key_cache(request.app.state).clear()
    return ops.key_view(key)


@router.get("/tenants/{tenant_id}/quotas", responses=errors(404))
async def read_quotas(tenant_id: str, session: SessionDep, redis: RedisDep) -> dict[str, Any]:
    tenant = await ops.require_tenant(session, tenant_id)
    plan = await plan_records.get_plan(session, name=tenant.plan)
    defaults = dict(plan.quotas) if plan else {}
    overrides = await ops.get_overrides(session, tenant_id=tenant.id)
    limits = effective_limits(defaults, overrides)
    store = QuotaStore(redis)
    # The month counter is made lazily: by a request once a monthly budget applies, never
    # while the month is unlimited, and again after Redis lost it. Without it the month's
    # use is Postgres' (usage_daily, a second behind the job rows), not 0. Only read here:
    # a seed from a lagging source would undercount the month from then on.
    month = await store.month_used(tenant_id=tenant.id)
    if month is None:
        month = await month_tokens_used(session, tenant_id=tenant.id)
    return {"tenant_id": tenant_id, "tier": tenant.plan, "tier_defaults": quota_view(defaults),
            "overrides": quota_view(overrides), "effective": quota_view(limits.as_dict()),
            "live": await store.state(tenant_id=tenant.id, limits=limits, month_used=month)}


@router.put("/tenants/{tenant_id}/quotas", responses={**errors(404), **WITH_BODY})
async def write_quotas(tenant_id: str, body: QuotaUpdate, actor: AdminDep,
                       session: SessionDep, redis: RedisDep) -> dict[str, Any]:
    tenant = await ops.require_tenant(session, tenant_id)
    await ops.set_overrides(session, actor=actor, tenant=tenant, overrides=body.overrides.stored())
    await session.commit()
    await bump_policy_generation(redis, [tenant.id])  # cached policies: the next call binds
    return await read_quotas(tenant_id, session, redis)


@router.get("/tiers", description="The plans tenants can be on.")
async def list_tiers(session: SessionDep) -> dict[str, Any]:
    plans = await plan_records.list_plans(session)
    return {"object": "list", "data": [_plan_view(p) for p in plans]}


@router.put("/tiers/{name}", responses=WITH_BODY,
            description="Create or replace a plan; its tenants' weight follows.")
async def upsert_tier(name: Annotated[str, Path(max_length=PLAN_NAME_MAX)], body: TierUpsert,
                      actor: AdminDep, session: SessionDep, redis: RedisDep) -> dict[str, Any]:
    before, plan = await plan_records.upsert_plan(
        session, name=name, fields={**body.model_dump(exclude={"quotas"}),
                                    "quotas": body.quotas.stored()})
    # The audit says "unlimited" where the admin API does, not null (stored None).
    record(session, actor=actor, action="tier.create" if before is None else "tier.update",
           target_type="tier", target_id=name,
           details={"from": None if before is None else {**before,
                                                         "quotas": quota_view(before["quotas"])},
                    "to": _plan_view(plan)})
    await session.commit()
    await bump_policy_generation(redis, await plan_records.tenants_on(session, name=name))
    return _plan_view(plan)


@router.delete("/tiers/{name}", responses=errors(409),
               description="Delete a plan no tenant is on (not a built-in one).")
async def delete_tier(name: str, actor: AdminDep, session: SessionDep) -> dict[str, Any]:
    if name in BUILTIN_PLANS:
        raise APIError(409, f"Plan '{name}' is built in: it can be edited, not deleted.",
                       code="builtin_plan")
    if not await plan_records.delete_plan(session, name=name):
        raise APIError(409, f"Plan '{name}' does not exist or still has tenants.",
                       code="conflict")
    record(session, actor=actor, action="tier.delete", target_type="tier", target_id=name)
    await session.commit()
    return {"name": name, "deleted": True}


def _plan_view(plan: Plan) -> dict[str, Any]:
    view = plan_records.plan_view(plan)
    return {**view, "quotas": quota_view(view["quotas"])}


router.include_router(key_router)  # /admin/keys/{key_id}: a key by its id alone
