"""Token and request accounting per tenant, UTC day, model and job class."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import BigInteger, Date, ForeignKey, String
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
