"""Tenant plans (free, standard, ...): fair-share weight, allowed service_tier values, SLO
targets, default quotas. The table keeps its first name, ``tiers``, as the admin API keeps
it on the wire (a migration-free rename)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import CheckConstraint, Float, Integer, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

# How the door admits a plan's realtime requests (docs/tenancy.md, "Admission modes"):
# "queue" while the predicted wait before a request starts is within max_queue_wait_ms (the
# TTFT target then only orders work), "shed" when its predicted TTFT meets the target.
ADMISSION_MODES = ("queue", "shed")
QUEUE, SHED = ADMISSION_MODES
# What happens to a realtime request past its plan's rate limits (requests or tokens per
# minute, concurrent requests): "refuse" (429), or "overflow": it runs at batch priority,
# when capacity is idle, instead. The monthly token budget binds either way.
OVER_QUOTA_MODES = ("refuse", "overflow")
REFUSE, OVERFLOW = OVER_QUOTA_MODES


class Plan(Base):
    __tablename__ = "tiers"
    __table_args__ = (
        CheckConstraint("admission_mode IN ('queue', 'shed')", name="admission_mode"),
        CheckConstraint("max_queue_wait_ms > 0", name="max_queue_wait_ms"),
        CheckConstraint("over_quota IN ('refuse', 'overflow')", name="over_quota"),
    )

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    weight: Mapped[float] = mapped_column(Float)
    allowed_service_tiers: Mapped[list[str]] = mapped_column(JSONB)
    ttft_slo_ms: Mapped[int] = mapped_column(Integer)
    tpot_slo_ms: Mapped[int] = mapped_column(Integer)
    admission_mode: Mapped[str] = mapped_column(String(8), server_default=QUEUE)
    max_queue_wait_ms: Mapped[int] = mapped_column(Integer, server_default="30000")
    # A realtime request past its rate limits: refused (429), or run as overflow at batch
    # priority when capacity is idle (service.api.overflow).
    over_quota: Mapped[str] = mapped_column(String(8), server_default=REFUSE)
    # QuotaLimits fields; None lifts a limit. JSONB so a new limit needs no migration.
    quotas: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[dt.datetime] = utcnow_column()
    updated_at: Mapped[dt.datetime] = utcnow_column()
