"""Signed webhooks: a tenant's endpoints, the event outbox, and one delivery per (event, endpoint).

An event row is written in the transaction that causes it (``service.store.webhook_events``),
together with a pending delivery for every enabled endpoint of the tenant subscribed to its
type. The dispatcher's delivery loop (``service.webhooks.delivery``) sends pending deliveries,
retrying with backoff until one succeeds or the retry window closes:

    pending ──▶ delivered
       └─────▶ failed      (the retry window is over)
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import BigInteger, Boolean, DateTime, ForeignKey, Identity, Index, Integer, String
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

WEBHOOK_PREFIX = "wh_"
EVENT_PREFIX = "evt_"


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookEndpoint(Base):
    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index("ix_webhook_endpoints_tenant", "tenant_id"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(String(2048))
    event_types: Mapped[list[str]] = mapped_column(JSONB)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # Standard Webhooks secrets ("whsec_<base64>"), kept readable: signing needs them.
    secret: Mapped[str] = mapped_column(String(128))
    # After a rotation the old secret signs too (a second signature) until this time.
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_expires_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True))
    created_at: Mapped[dt.datetime] = utcnow_column()
    updated_at: Mapped[dt.datetime] = utcnow_column()

    @property
    def public_id(self) -> str:
        return WEBHOOK_PREFIX + self.id.hex


class WebhookEvent(Base):
    """The outbox: one row per event, written with the change that caused it."""

    __tablename__ = "webhook_events"
    __table_args__ = (Index("ix_webhook_events_tenant_created", "tenant_id", "created_at"),
                      Index("ix_webhook_events_created", "created_at"))  # the retention sweep

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))

    @property
    def public_id(self) -> str:
        return EVENT_PREFIX + self.id.hex


class WebhookDelivery(Base):
    """One event to one endpoint: its state and every attempt so far (the delivery log)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_endpoint", "endpoint_id", "id"),
        Index("ix_webhook_deliveries_event", "event_id"),
        Index("ix_webhook_deliveries_due", "next_attempt_at",
              postgresql_where=sql_text("status = 'pending'")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    event_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhook_events.id", ondelete="CASCADE"))
    endpoint_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    last_attempt_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(512))
    delivered_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # [{"attempt", "at", "status_code", "error", "duration_ms"}, ...]: bounded by the retry
    # window (a few dozen attempts at most).
    log: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)
    created_at: Mapped[dt.datetime] = utcnow_column()
