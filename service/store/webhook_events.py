"""Webhook events: their types, their payload (OpenAI's event shape), and ``record_event``, the
one way to emit one.

Call ``record_event`` inside the transaction that makes the change the event reports (the
transactional outbox): the event row, and a pending delivery for each enabled endpoint of the
tenant subscribed to the type, commit or roll back with the change. Nothing is sent here; the
dispatcher's delivery loop (``service.webhooks.delivery``) does that after the commit.

    record_event(session, batch.tenant_id, "batch.completed", {"id": batch.public_id})

Endpoints are matched when the event is recorded: an endpoint created, enabled or subscribed
later does not receive earlier events.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from sqlalchemy import Insert, insert, literal, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.models.webhooks import (
    EVENT_PREFIX,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

BATCH_EVENT_TYPES = ("batch.completed", "batch.failed", "batch.expired", "batch.cancelled")
# Background responses (data: {"id": "resp_..."}), emitted by the code that ends them.
RESPONSE_EVENT_TYPES = ("response.completed", "response.failed", "response.cancelled",
                        "response.incomplete")
# A tenant's month-to-date spend reached one of its budget's thresholds (service.spend.budgets).
BUDGET_EVENT_TYPES = ("budget.threshold_reached",)
EVENT_TYPES = BATCH_EVENT_TYPES + RESPONSE_EVENT_TYPES + BUDGET_EVENT_TYPES


class UnknownEventType(ValueError):
    """A caller emitted a type this module does not list (a bug, not bad input)."""


def event_statements(*, event_id: uuid.UUID, tenant_id: uuid.UUID, type_: str,
                     data: dict[str, Any], now: dt.datetime) -> tuple[Insert, Insert]:
    """The outbox row, and one pending delivery per enabled endpoint subscribed to ``type_``
    (an INSERT ... SELECT, so no endpoint read races the insert)."""
    if type_ not in EVENT_TYPES:
        raise UnknownEventType(f"unknown webhook event type {type_!r}")
    event = insert(WebhookEvent).values(id=event_id, tenant_id=tenant_id, type=type_,
                                        data=data, created_at=now)
    subscribed = select(literal(event_id), WebhookEndpoint.id,
                        literal(DeliveryStatus.PENDING.value), literal(0), literal(now),
                        literal([], JSONB)).where(
        WebhookEndpoint.tenant_id == tenant_id, WebhookEndpoint.enabled.is_(True),
        WebhookEndpoint.event_types.contains([type_]))
    deliveries = insert(WebhookDelivery).from_select(
        ["event_id", "endpoint_id", "status", "attempts", "next_attempt_at", "log"], subscribed)
    return event, deliveries


def record_event(session: Session, tenant_id: uuid.UUID, type_: str, data: dict[str, Any], *,
                 now: dt.datetime | None = None) -> str:
    """Write the event (and its deliveries) in ``session``'s transaction; returns its id
    (``evt_...``). The caller commits, with the change the event reports."""
    event_id = uuid.uuid4()
    for statement in event_statements(event_id=event_id, tenant_id=tenant_id, type_=type_,
                                      data=data, now=now or dt.datetime.now(dt.UTC)):
        session.execute(statement)
    return EVENT_PREFIX + event_id.hex


async def record_event_async(session: AsyncSession, tenant_id: uuid.UUID, type_: str,
                             data: dict[str, Any], *, now: dt.datetime | None = None) -> str:
    """``record_event`` for the API's async sessions."""
    event_id = uuid.uuid4()
    for statement in event_statements(event_id=event_id, tenant_id=tenant_id, type_=type_,
                                      data=data, now=now or dt.datetime.now(dt.UTC)):
        await session.execute(statement)
    return EVENT_PREFIX + event_id.hex


def payload(*, event_id: uuid.UUID, type_: str, created_at: dt.datetime,
            data: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's webhook event: ``{"id": "evt_...", "object": "event", "type", "created_at"
    (Unix seconds), "data"}``."""
    return {"id": EVENT_PREFIX + event_id.hex, "object": "event", "type": type_,
            "created_at": int(created_at.timestamp()), "data": data}


def payload_body(event: WebhookEvent) -> str:
    """The exact JSON text sent (and signed) for an event."""
    return json.dumps(payload(event_id=event.id, type_=event.type, created_at=event.created_at,
                              data=event.data), separators=(",", ":"))
