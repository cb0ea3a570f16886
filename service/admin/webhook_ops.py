"""Webhook endpoint operations for the admin API. Each write records its audit entry in the
same transaction (never the secret); the route commits."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import audit
from service.store.models.tenants import Tenant
from service.store.models.webhooks import (
    WEBHOOK_PREFIX,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from service.web.errors import APIError
from service.webhooks.signing import new_secret, secret_hint

MAX_ENDPOINTS_PER_TENANT = 20


def _ts(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def webhook_view(ep: WebhookEndpoint) -> dict[str, Any]:
    return {"id": ep.public_id, "object": "webhook_endpoint", "tenant_id": str(ep.tenant_id),
            "url": ep.url, "event_types": list(ep.event_types), "enabled": ep.enabled,
            "secret_hint": secret_hint(ep.secret),
            "previous_secret_expires_at": _ts(ep.previous_secret_expires_at),
            "created_at": _ts(ep.created_at), "updated_at": _ts(ep.updated_at)}


def _audited(ep: WebhookEndpoint) -> dict[str, Any]:
    return {"url": ep.url, "event_types": list(ep.event_types), "enabled": ep.enabled}


async def require_webhook(session: AsyncSession, tenant: Tenant,
                          webhook_id: str) -> WebhookEndpoint:
    raw = webhook_id.removeprefix(WEBHOOK_PREFIX)
    try:
        ep = await session.get(WebhookEndpoint, uuid.UUID(raw))
    except ValueError:
        ep = None
    if ep is None or ep.tenant_id != tenant.id:
        raise APIError(404, f"No webhook endpoint with id '{webhook_id}' for this tenant.",
                       code="not_found")
    return ep


async def list_webhooks(session: AsyncSession, tenant: Tenant) -> list[dict[str, Any]]:
    rows = await session.scalars(select(WebhookEndpoint).where(
        WebhookEndpoint.tenant_id == tenant.id).order_by(WebhookEndpoint.created_at,
                                                          WebhookEndpoint.id))
    return [webhook_view(ep) for ep in rows.all()]


async def create_webhook(session: AsyncSession, *, actor: str, tenant: Tenant, url: str,
                         event_types: list[str], enabled: bool) -> tuple[WebhookEndpoint, str]:
    """The endpoint and its signing secret (returned this once, never again)."""
    count = await session.scalar(select(func.count()).select_from(WebhookEndpoint).where(
        WebhookEndpoint.tenant_id == tenant.id))
    if (count or 0) >= MAX_ENDPOINTS_PER_TENANT:
        raise APIError(409, f"A tenant may have at most {MAX_ENDPOINTS_PER_TENANT} webhook "
                            f"endpoints.", code="conflict")
    secret = new_secret()
    ep = WebhookEndpoint(tenant_id=tenant.id, url=url, event_types=event_types,
                         enabled=enabled, secret=secret)
    session.add(ep)
    await session.flush()
    await session.refresh(ep)
    audit.record(session, actor=actor, action="webhook.create", target_type="webhook",
                 target_id=ep.public_id, details={"tenant_id": str(tenant.id), **_audited(ep)})
    return ep, secret


async def update_webhook(session: AsyncSession, *, actor: str, ep: WebhookEndpoint,
                         url: str | None, event_types: list[str] | None,
                         enabled: bool | None) -> WebhookEndpoint:
    before = _audited(ep)
    if url is not None:
        ep.url = url
    if event_types is not None:
        ep.event_types = event_types
    if enabled is not None:
        ep.enabled = enabled
    after = _audited(ep)
    if after != before:
        ep.updated_at = dt.datetime.now(dt.UTC)
        action = "webhook.update"
        if after["enabled"] != before["enabled"] and {**after, "enabled": 0} == {
                **before, "enabled": 0}:
            action = "webhook.enable" if ep.enabled else "webhook.disable"
        audit.record(session, actor=actor, action=action, target_type="webhook",
                     target_id=ep.public_id, details={"from": before, "to": after})
    await session.flush()
    return ep


async def rotate_secret(session: AsyncSession, *, actor: str, ep: WebhookEndpoint,
                        grace_s: int) -> str:
    """A new secret (returned this once); the old one also signs for ``grace_s`` seconds."""
    now = dt.datetime.now(dt.UTC)
    secret = new_secret()
    ep.previous_secret = ep.secret if grace_s > 0 else None
    ep.previous_secret_expires_at = now + dt.timedelta(seconds=grace_s) if grace_s > 0 else None
    ep.secret, ep.updated_at = secret, now
    audit.record(session, actor=actor, action="webhook.rotate_secret", target_type="webhook",
                 target_id=ep.public_id, details={"previous_secret_grace_seconds": grace_s})
    await session.flush()
    return secret


async def delete_webhook(session: AsyncSession, *, actor: str, ep: WebhookEndpoint) -> None:
    """Deletes the endpoint and its deliveries (pending ones are not sent)."""
    audit.record(session, actor=actor, action="webhook.delete", target_type="webhook",
                 target_id=ep.public_id, details={"tenant_id": str(ep.tenant_id),
                                                  **_audited(ep)})
    await session.delete(ep)
    await session.flush()


def delivery_view(d: WebhookDelivery, event: WebhookEvent) -> dict[str, Any]:
    return {"id": d.id, "object": "webhook_delivery", "event_id": event.public_id,
            "event_type": event.type, "event_data": event.data, "status": d.status,
            "attempts": d.attempts,
            "next_attempt_at": _ts(d.next_attempt_at) if d.status == DeliveryStatus.PENDING
            else None,
            "last_attempt_at": _ts(d.last_attempt_at), "last_status_code": d.last_status_code,
            "last_error": d.last_error, "delivered_at": _ts(d.delivered_at),
            "created_at": _ts(d.created_at), "log": list(d.log or [])}


async def list_deliveries(session: AsyncSession, *, ep: WebhookEndpoint, limit: int,
                          status: str | None, before: int | None) -> tuple[list[dict[str, Any]],
                                                                           bool]:
    """Newest first; ``before`` is the last id of the previous page."""
    query = (select(WebhookDelivery, WebhookEvent)
             .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
             .where(WebhookDelivery.endpoint_id == ep.id))
    if status is not None:
        query = query.where(WebhookDelivery.status == status)
    if before is not None:
        query = query.where(WebhookDelivery.id < before)
    rows = (await session.execute(query.order_by(WebhookDelivery.id.desc())
                                  .limit(limit + 1))).all()
    return [delivery_view(d, e) for d, e in rows[:limit]], len(rows) > limit


async def redeliver(session: AsyncSession, *, actor: str, ep: WebhookEndpoint,
                    delivery_id: int) -> dict[str, Any]:
    """Send a delivered or failed delivery once more, now. Past the retry window it gets that
    one attempt (a failure ends it ``failed`` again)."""
    row = (await session.execute(
        select(WebhookDelivery, WebhookEvent)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.endpoint_id == ep.id)
        .with_for_update(of=WebhookDelivery))).first()
    if row is None:
        raise APIError(404, f"No delivery {delivery_id} for this webhook endpoint.",
                       code="not_found")
    delivery, event = row
    if delivery.status == DeliveryStatus.PENDING:
        raise APIError(409, "The delivery is already pending; it is sent when due.",
                       code="invalid_state")
    audit.record(session, actor=actor, action="webhook.redeliver", target_type="webhook",
                 target_id=ep.public_id, details={"delivery_id": delivery.id,
                                                  "event_id": event.public_id,
                                                  "was": delivery.status})
    delivery.status, delivery.next_attempt_at = DeliveryStatus.PENDING, dt.datetime.now(dt.UTC)
    await session.flush()
    return delivery_view(delivery, event)
