"""Tenants and their API keys."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Integer, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.store.db import Base, utcnow_column


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The tenant's plan; the column keeps its original name, ``tier`` (as does the API field).
    plan: Mapped[str] = mapped_column(
        "tier", String(32), ForeignKey("tiers.name", onupdate="CASCADE"), default="standard")
    # Effective fair-share weight, read by the dispatcher. service.plans keeps it equal to the
    # plan's weight (set on a change of plan and when a plan's weight is edited).
    weight: Mapped[float] = mapped_column(default=1.0)
    suspended_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[dt.datetime] = utcnow_column()

    keys: Mapped[list[ApiKey]] = relationship(back_populates="tenant", cascade="all, delete")


class ApiKey(Base):
    """An API key, stored only as an HMAC of the secret; the prefix identifies it to humans."""

    __tablename__ = "api_keys"
    __table_args__ = tuple(
        CheckConstraint(f"{c} IS NULL OR {c} >= 1", name=f"{c}_positive")
        for c in ("requests_per_minute", "tokens_per_minute", "concurrent_requests"))

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128), default="default")
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = utcnow_column()
    last_used_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # The key's own policy (service.tenants.key_policy): limits counted per key beside the
    # tenant's (null: only the tenant's), and the models it may use (null: every model).
    requests_per_minute: Mapped[int | None] = mapped_column(Integer)
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer)
    concurrent_requests: Mapped[int | None] = mapped_column(Integer)
    allowed_models: Mapped[list[Any] | None] = mapped_column(JSONB)

    tenant: Mapped[Tenant] = relationship(back_populates="keys")
