"""The audit log: who changed what, when. Written in the same transaction as the change."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Identity, Index, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column


class AuditEntry(Base):
    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_target", "target_type", "target_id"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[dt.datetime] = utcnow_column()
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))  # e.g. tenant.create, quota.update
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str] = mapped_column(String(64))
    # Before/after values; never a clear key (key issue records the prefix only).
    details: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
