"""Admin API: a tenant's webhook endpoints (docs/webhooks.md). Thin routes over webhook_ops;
every change commits together with its audit entry. The signing secret is in the answer to
create and rotate_secret only."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query

from service.admin import webhook_ops as ops
from service.admin.tenant_ops import require_tenant
from service.admin.webhook_schemas import SecretRotate, WebhookCreate, WebhookUpdate
from service.store.settings import Settings
from service.web.deps import AdminDep, SessionDep, SettingsDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, WITH_BODY, errors
from service.webhooks.targets import TargetRefused, check_registered

BIGINT_MAX = 2**63 - 1  # delivery ids
router = APIRouter(prefix="/admin/tenants/{tenant_id}/webhooks",
                   dependencies=[Depends(require_admin)], responses=ADMIN_ROUTES)


def _check_target(url: str, settings: Settings) -> None:
    """Private and internal addresses are refused unless allowed (service.webhooks.targets)."""
    if settings.webhooks.allow_private:
        return
    try:
        check_registered(url)
    except TargetRefused as exc:
        raise APIError(400, f"{str(exc)[:1].upper()}{str(exc)[1:]}.", code="invalid_value",
                       param="url") from exc


@router.post("", status_code=201, responses={**errors(404, 409), **WITH_BODY})
async def create_webhook(tenant_id: str, body: WebhookCreate, actor: AdminDep,
                         session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    _check_target(body.url, settings)
    tenant = await require_tenant(session, tenant_id)
    ep, secret = await ops.create_webhook(session, actor=actor, tenant=tenant, url=body.url,
                                          event_types=body.event_types, enabled=body.enabled)
    await session.commit()
    return {**ops.webhook_view(ep), "secret": secret}  # the only time it is shown


@router.get("", responses=errors(404))
async def list_webhooks(tenant_id: str, session: SessionDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    return {"object": "list", "data": await ops.list_webhooks(session, tenant)}


@router.get("/{webhook_id}", responses=errors(404))
async def read_webhook(tenant_id: str, webhook_id: str, session: SessionDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    return ops.webhook_view(await ops.require_webhook(session, tenant, webhook_id))


@router.patch("/{webhook_id}", responses={**errors(404), **WITH_BODY})
async def update_webhook(tenant_id: str, webhook_id: str, body: WebhookUpdate, actor: AdminDep,
                         session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    if body.url is not None:
        _check_target(body.url, settings)
    tenant = await require_tenant(session, tenant_id)
    ep = await ops.update_webhook(session, actor=actor,
                                  ep=await ops.require_webhook(session, tenant, webhook_id),
                                  url=body.url, event_types=body.event_types,
                                  enabled=body.enabled)
    await session.commit()
    return ops.webhook_view(ep)


@router.post("/{webhook_id}/rotate_secret", responses={**errors(404), **WITH_BODY})
async def rotate_secret(tenant_id: str, webhook_id: str, actor: AdminDep, session: SessionDep,
                        body: SecretRotate | None = None) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    ep = await ops.require_webhook(session, tenant, webhook_id)
    grace = (body or SecretRotate()).previous_secret_grace_seconds
    secret = await ops.rotate_secret(session, actor=actor, ep=ep, grace_s=grace)
    await session.commit()
    return {**ops.webhook_view(ep), "secret": secret}  # the only time it is shown


@router.delete("/{webhook_id}", responses=errors(404))
async def delete_webhook(tenant_id: str, webhook_id: str, actor: AdminDep,
                         session: SessionDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    ep = await ops.require_webhook(session, tenant, webhook_id)
    public_id = ep.public_id
    await ops.delete_webhook(session, actor=actor, ep=ep)
    await session.commit()
    return {"id": public_id, "object": "webhook_endpoint", "deleted": True}


@router.get("/{webhook_id}/deliveries", responses=errors(404))
async def list_deliveries(tenant_id: str, webhook_id: str, session: SessionDep,
                          limit: int = Query(default=20, ge=1, le=100),
                          status: Literal["pending", "delivered", "failed"] | None = None,
                          before: int | None = Query(default=None, ge=1, le=BIGINT_MAX),
                          ) -> dict[str, Any]:
    """The delivery log, newest first: each delivery's state and every attempt (time, status
    code, error, duration, the next attempt's time)."""
    tenant = await require_tenant(session, tenant_id)
    ep = await ops.require_webhook(session, tenant, webhook_id)
    data, more = await ops.list_deliveries(session, ep=ep, limit=limit, status=status,
                                           before=before)
    return {"object": "list", "data": data, "has_more": more}


@router.post("/{webhook_id}/deliveries/{delivery_id}/redeliver", responses=errors(404, 409))
async def redeliver(tenant_id: str, webhook_id: str,
                    delivery_id: Annotated[int, Path(ge=1, le=BIGINT_MAX)], actor: AdminDep,
                    session: SessionDep) -> dict[str, Any]:
    """Send a delivered or failed delivery again, now (409 while it is pending)."""
    tenant = await require_tenant(session, tenant_id)
    ep = await ops.require_webhook(session, tenant, webhook_id)
    view = await ops.redeliver(session, actor=actor, ep=ep, delivery_id=delivery_id)
    await session.commit()
    return view
