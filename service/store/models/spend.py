"""Money: prices per model (versioned), budgets per tenant, and the budget alerts sent.

A price is never edited in place: every change appends a version that is in force from its
``effective_from`` until the next version of the same model. A job is charged by the version
in force when it ended (``jobs.finished_at``), so a later price change cannot rewrite what a
past month cost (service.spend.queries). A version with ``input_per_mtok`` NULL unprices the
model from then on: its jobs cost 0 and are reported as unpriced.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Numeric,
    String,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

# Per-million-token prices: 12 digits before the point, 6 after.
MONEY = Numeric(18, 6)
PERCENT = Numeric(5, 2)


class ModelPrice(Base):
    __tablename__ = "model_prices"
    __table_args__ = (
        Index("ix_model_prices_model_from", "model", "effective_from"),
        CheckConstraint("batch_discount_pct BETWEEN 0 AND 100 "
                        "AND flex_discount_pct BETWEEN 0 AND 100", name="discounts"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    model: Mapped[str] = mapped_column(String(256))
    # Realtime (service_tier default/priority) prices; NULL: the model is unpriced.
    input_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    output_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    # Batch and flex: a discount off the realtime prices, unless explicit prices are set.
    batch_discount_pct: Mapped[Decimal] = mapped_column(PERCENT)
    flex_discount_pct: Mapped[Decimal] = mapped_column(PERCENT)
    batch_input_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    batch_output_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    flex_input_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    flex_output_per_mtok: Mapped[Decimal | None] = mapped_column(MONEY)
    effective_from: Mapped[dt.datetime] = utcnow_column()
    created_by: Mapped[str] = mapped_column(String(128))


class TenantBudget(Base):
    """A tenant's monthly budget in money (UTC calendar months)."""

    __tablename__ = "tenant_budgets"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    monthly_limit: Mapped[Decimal] = mapped_column(MONEY)
    # Percentages of the limit that send an alert, ascending, e.g. [50, 80, 100].
    thresholds: Mapped[list[int]] = mapped_column(JSONB)
    # At 100%: refuse new requests (429 insufficient_quota) until the month ends, or only alert.
    hard_stop: Mapped[bool] = mapped_column(Boolean, default=False)
    # The first day of the month in which the hard stop is in force (set by the budget check);
    # any other month: not stopped.
    stopped_month: Mapped[dt.date | None] = mapped_column(Date)
    updated_at: Mapped[dt.datetime] = utcnow_column()


class BudgetAlert(Base):
    """One alert per tenant, month and threshold: the primary key makes a second one a no-op."""

    __tablename__ = "budget_alerts"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    month: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    threshold_pct: Mapped[int] = mapped_column(Integer, primary_key=True)
    spend: Mapped[Decimal] = mapped_column(MONEY)
    monthly_limit: Mapped[Decimal] = mapped_column(MONEY)
    event_id: Mapped[str] = mapped_column(String(64))
    sent_at: Mapped[dt.datetime] = utcnow_column()

    def view(self) -> dict[str, Any]:
        return {"month": self.month.isoformat()[:7], "threshold_pct": self.threshold_pct,
                "spend": str(self.spend), "monthly_limit": str(self.monthly_limit),
                "event_id": self.event_id, "sent_at": self.sent_at.isoformat()}
