"""Admin API: one API key by its id (read, change its policy, revoke), so a key a user quotes
needs no tenant to find it. Included in the admin router (its prefix and credential)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.admin import key_ops
from service.admin import tenant_ops as ops
from service.admin.schemas import KeyUpdate
from service.tenants.key_cache import key_cache
from service.web.deps import AdminDep, SessionDep
from service.web.responses import WITH_BODY, errors

router = APIRouter()


@router.get("/keys/{key_id}", responses=errors(404))
async def read_key(key_id: str, session: SessionDep) -> dict[str, Any]:
    key, tenant = await key_ops.require_key(session, key_id)
    return {**ops.key_view(key), "tenant_id": str(tenant.id), "tenant_name": tenant.name}


@router.patch("/keys/{key_id}", responses={**errors(404, 409), **WITH_BODY},
              description="Change a key's name, expiry, limits or allowed models; only the "
                          "fields sent change (null: no limit of its own, every model, never "
                          "expires).")
async def update_key(key_id: str, body: KeyUpdate, actor: AdminDep, session: SessionDep,
                     request: Request) -> dict[str, Any]:
    key, tenant = await key_ops.require_key(session, key_id)
    await key_ops.update_key(session, actor=actor, key=key, tenant=tenant,
                             fields=body.changes())
    await session.commit()
    key_cache(request.app.state).clear()  # here at once; other API processes within its TTL
    return {**ops.key_view(key), "tenant_id": str(tenant.id), "tenant_name": tenant.name}


@router.delete("/keys/{key_id}", responses=errors(404))
async def revoke_key_by_id(key_id: str, actor: AdminDep, session: SessionDep,
                           request: Request) -> dict[str, Any]:
    key, tenant = await key_ops.require_key(session, key_id)
    key = await ops.revoke_key(session, actor=actor, tenant=tenant, key_id=key_id)
    await session.commit()
    key_cache(request.app.state).clear()
    return {**ops.key_view(key), "tenant_id": str(tenant.id), "tenant_name": tenant.name}
