"""Token and request accounting per tenant, UTC day, model and job class."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import BigInteger, Date, DateTime, ForeignKey, SmallInteger, String, func
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base


class UsageDaily(Base):
    __tablename__ = "usage_daily"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    job_class: Mapped[str] = mapped_column(String(16), primary_key=True)  # realtime | batch
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    failed_requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageRollup(Base):
    """How far the usage roll-up has counted ended jobs (service.store.usage): one row."""

    __tablename__ = "usage_rollup"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)  # always 1
    last_xid: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True),
                                                    server_default=func.now())
