"""API keys' own policy in the admin API: read a key by its id, check a policy against its
tenant's limits, and change it. Each change writes its audit entry in the same transaction;
the route commits and clears this process's key cache (service.tenants.key_cache: other API
processes see it within FAIRWAY_KEY_CACHE_SECONDS)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import audit
from service.quotas.policy import load_policy
from service.store.models.tenants import ApiKey, Tenant
from service.tenants.key_policy import KEY_LIMITS, KEY_POLICY_FIELDS, above_tenant, expired
from service.web.errors import APIError


def _ts(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def key_status(key: ApiKey, now: dt.datetime | None = None) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if expired(key.expires_at, now or dt.datetime.now(dt.UTC)):
        return "expired"
    return "active"


def policy_view(key: ApiKey) -> dict[str, Any]:
    """The key's policy as the admin API shows it: null limits are the tenant's alone, null
    models are every model."""
    return {"requests_per_minute": key.requests_per_minute,
            "tokens_per_minute": key.tokens_per_minute,
            "concurrent_requests": key.concurrent_requests,
            "allowed_models": key.allowed_models, "status": key_status(key)}


async def require_key(session: AsyncSession, key_id: str) -> tuple[ApiKey, Tenant]:
    try:
        key = await session.get(ApiKey, uuid.UUID(key_id))
    except ValueError:
        key = None
    if key is None:
        raise APIError(404, f"No key with id '{key_id}'.", code="not_found", param="key_id")
    tenant = await session.get(Tenant, key.tenant_id)
    assert tenant is not None  # the foreign key
    return key, tenant


async def check_within_tenant(session: AsyncSession, tenant: Tenant,
                              limits: dict[str, Any]) -> None:
    """400 naming the first key limit above its tenant's current one."""
    policy = await load_policy(session, tenant_id=tenant.id, plan=tenant.plan)
    above = above_tenant(limits, policy.limits)
    if above is not None:
        name, mine, theirs = above
        raise APIError(400, f"{name} is {mine}, above the tenant's own limit of {theirs}: a "
                            f"key's limit is a share of its tenant's.", code="invalid_value",
                       param=name)


def apply_policy(key: ApiKey, fields: dict[str, Any]) -> None:
    for name in KEY_POLICY_FIELDS:
        if name in fields:
            setattr(key, name, fields[name])


async def update_key(session: AsyncSession, *, actor: str, key: ApiKey, tenant: Tenant,
                     fields: dict[str, Any]) -> ApiKey:
    """Change the fields given (name, expiry, limits, models); null lifts a limit, opens the
    key to every model, or makes it never expire."""
    if key.revoked_at is not None:
        raise APIError(409, "This key is revoked: issue a new one instead.", code="conflict")
    limits = {name: fields.get(name, getattr(key, name)) for name in KEY_LIMITS}
    await check_within_tenant(session, tenant, limits)
    before = {name: _json(getattr(key, name)) for name in fields}
    if "name" in fields:
        key.name = fields["name"]
    apply_policy(key, fields)
    audit.record(session, actor=actor, action="key.update", target_type="tenant",
                 target_id=str(tenant.id),
                 details={"key_id": str(key.id), "prefix": key.prefix, "from": before,
                          "to": {name: _json(getattr(key, name)) for name in fields}})
    await session.flush()
    return key


def _json(value: Any) -> Any:
    return _ts(value) if isinstance(value, dt.datetime) else value
