"""Tenant plans (free, standard, ...): fair-share weight, allowed service_tier values, SLO
targets, default quotas. The table keeps its first name, ``tiers``, as the admin API keeps
it on the wire (a migration-free rename)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Float, Integer, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column


class Plan(Base):
    __tablename__ = "tiers"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    weight: Mapped[float] = mapped_column(Float)
    allowed_service_tiers: Mapped[list[str]] = mapped_column(JSONB)
    ttft_slo_ms: Mapped[int] = mapped_column(Integer)
    tpot_slo_ms: Mapped[int] = mapped_column(Integer)
    # QuotaLimits fields; None lifts a limit. JSONB so a new limit needs no migration.
    quotas: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[dt.datetime] = utcnow_column()
    updated_at: Mapped[dt.datetime] = utcnow_column()
