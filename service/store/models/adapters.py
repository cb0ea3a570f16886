"""A tenant's LoRA adapter: a PEFT adapter on one of the served base models."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Index, Integer, String, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

ADAPTER_PREFIX = "lora-"


class AdapterStatus(enum.StrEnum):
    READY = "ready"  # validated and stored: usable as `model`
    DELETED = "deleted"  # gone for clients; the row stays for the jobs that named it


class LoraAdapter(Base):
    __tablename__ = "lora_adapters"
    __table_args__ = (
        # One live adapter per name and base model per tenant; a deleted name can be reused.
        Index("uq_lora_adapters_live_name", "tenant_id", "base_model", "name", unique=True,
              postgresql_where=text("deleted_at IS NULL")),
        Index("ix_lora_adapters_tenant_created", "tenant_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    base_model: Mapped[str] = mapped_column(String(256))
    rank: Mapped[int] = mapped_column(Integer)
    target_modules: Mapped[list[Any]] = mapped_column(JSONB)
    bytes: Mapped[int] = mapped_column(BigInteger)
    # The folder's key prefix in file storage (adapter_config.json and the weights under it);
    # never shown to clients.
    storage_key: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(16), default=AdapterStatus.READY)
    created_at: Mapped[dt.datetime] = utcnow_column()
    deleted_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    @property
    def public_id(self) -> str:
        return ADAPTER_PREFIX + self.id.hex


def parse_adapter_id(value: str) -> uuid.UUID | None:
    raw = value[len(ADAPTER_PREFIX):] if value.startswith(ADAPTER_PREFIX) else value
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None
