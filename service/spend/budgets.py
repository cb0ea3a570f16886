"""Monthly budgets in money: the check that alerts at each threshold once per month and sets
or lifts a tenant's hard stop, run by the active dispatcher (``BudgetWatch``), and the reads and
writes the admin API uses.

An alert is the webhook event ``budget.threshold_reached``, written in the transaction that
records the alert row (the outbox, service.store.webhook_events), so the existing signed
delivery sends it with its retries, and the row's primary key (tenant, month, threshold) makes
a second alert for the same threshold in the same month impossible, whoever checks.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.spend.closed_days import ClosedDays
from service.spend.money import crossed_thresholds, month_start, next_month, over_budget, shown
from service.spend.queries import month_spend, spend_lines, spend_lines_sync, utc_midnight
from service.store.db import sync_session
from service.store.models.spend import BudgetAlert, TenantBudget
from service.store.webhook_events import record_event

log = logging.getLogger("fairway.spend")

BUDGET_EVENT = "budget.threshold_reached"
DEFAULT_THRESHOLDS = (50, 80, 100)


def stop_month(budget: TenantBudget, spend: Decimal, month: dt.date) -> dt.date | None:
    """The month a hard stop is in force for, or None: only a hard-stop budget that is spent."""
    return month if budget.hard_stop and over_budget(spend, budget.monthly_limit) else None


def month_window(now: dt.datetime) -> tuple[dt.date, dt.datetime, dt.datetime]:
    month = month_start(now.astimezone(dt.UTC).date())
    return month, utc_midnight(month), utc_midnight(next_month(month))


def event_data(budget: TenantBudget, *, month: dt.date, threshold: int, spend: Decimal,
               currency: str) -> dict[str, Any]:
    return {"tenant_id": str(budget.tenant_id), "month": month.isoformat()[:7],
            "threshold_pct": threshold, "spend": shown(spend),
            "monthly_limit": shown(budget.monthly_limit), "currency": currency,
            "hard_stop": budget.hard_stop}


def check_budgets(session: Session, *, currency: str, now: dt.datetime | None = None,
                  closed: ClosedDays | None = None) -> int:
    """Alert every threshold newly reached this month and set or lift hard stops; commits.
    Returns the number of alerts sent. ``closed`` keeps the closed days' spend between calls
    (the dispatcher's); without it the whole month is read."""
    now = now or dt.datetime.now(dt.UTC)
    month, start, end = month_window(now)
    budgets = session.scalars(select(TenantBudget).with_for_update(skip_locked=True)).all()
    if not budgets:
        session.rollback()
        return 0
    tenant_ids = [b.tenant_id for b in budgets]
    spend = (closed.month_spend(session, month=month, today=now.astimezone(dt.UTC).date(),
                                tenant_ids=tenant_ids) if closed is not None
             else month_spend(spend_lines_sync(session, start=start, end=end, detail=False,
                                               tenant_ids=tenant_ids)))
    sent: dict[uuid.UUID, set[int]] = {}
    for tenant_id, threshold in session.execute(
            select(BudgetAlert.tenant_id, BudgetAlert.threshold_pct)
            .where(BudgetAlert.month == month)).all():
        sent.setdefault(tenant_id, set()).add(threshold)
    alerts = 0
    for budget in budgets:
        used = spend.get(budget.tenant_id, Decimal(0))
        for threshold in crossed_thresholds(used, budget.monthly_limit, budget.thresholds,
                                            sent.get(budget.tenant_id, ())):
            alerts += _alert(session, budget, month=month, threshold=threshold, spend=used,
                             currency=currency)
        stopped = stop_month(budget, used, month)
        if budget.stopped_month != stopped:
            budget.stopped_month = stopped
            log.info("budget stop %s", "set" if stopped else "lifted",
                     extra={"tenant_id": str(budget.tenant_id), "spend": shown(used)})
    session.commit()
    return alerts


def _alert(session: Session, budget: TenantBudget, *, month: dt.date, threshold: int,
           spend: Decimal, currency: str) -> int:
    claimed = session.execute(
        insert(BudgetAlert).values(tenant_id=budget.tenant_id, month=month,
                                   threshold_pct=threshold, spend=spend,
                                   monthly_limit=budget.monthly_limit, event_id="")
        .on_conflict_do_nothing().returning(BudgetAlert.threshold_pct)).first()
    if claimed is None:
        return 0  # already sent (another checker, or a race with this one's read)
    event_id = record_event(session, budget.tenant_id, BUDGET_EVENT,
                            event_data(budget, month=month, threshold=threshold, spend=spend,
                                       currency=currency))
    session.execute(update(BudgetAlert).where(
        BudgetAlert.tenant_id == budget.tenant_id, BudgetAlert.month == month,
        BudgetAlert.threshold_pct == threshold).values(event_id=event_id))
    return 1


class BudgetWatch:
    """The dispatcher's upkeep step (`fairway scheduler` hands it in): ``check_budgets`` at
    most every ``every_s``. Errors are logged; the next tick tries again."""

    def __init__(self, database_url: str, *, every_s: float, currency: str) -> None:
        self.database_url = database_url
        self.every_s = every_s
        self.currency = currency
        self.closed = ClosedDays()
        self._next_at = 0.0

    def tick(self) -> None:
        if time.monotonic() < self._next_at:
            return
        self._next_at = time.monotonic() + self.every_s
        try:
            with sync_session(self.database_url) as session:
                check_budgets(session, currency=self.currency, closed=self.closed)
        except Exception:  # never take the dispatcher down
            log.exception("budget check failed")


# The admin API's side.

async def month_to_date(session: AsyncSession, tenant_id: uuid.UUID,
                        now: dt.datetime | None = None) -> Decimal:
    _, start, end = month_window(now or dt.datetime.now(dt.UTC))
    lines = await spend_lines(session, start=start, end=end, tenant_ids=[tenant_id], detail=False)
    return month_spend(lines).get(tenant_id, Decimal(0))


async def budget_view(session: AsyncSession, tenant_id: uuid.UUID, *, currency: str,
                      now: dt.datetime | None = None) -> dict[str, Any]:
    """The tenant's budget, this month's spend against it and the alerts sent this month."""
    now = now or dt.datetime.now(dt.UTC)
    month, _, _ = month_window(now)
    budget = await session.get(TenantBudget, tenant_id)
    spend = await month_to_date(session, tenant_id, now)
    alerts = (await session.scalars(
        select(BudgetAlert).where(BudgetAlert.tenant_id == tenant_id, BudgetAlert.month == month)
        .order_by(BudgetAlert.threshold_pct))).all()
    view: dict[str, Any] = {"object": "budget", "tenant_id": str(tenant_id),
                            "currency": currency, "month": month.isoformat()[:7],
                            "spend": shown(spend), "alerts": [a.view() for a in alerts]}
    if budget is None:
        return {**view, "monthly_limit": None, "thresholds": [], "hard_stop": False,
                "percent_used": None, "stopped": False}
    return {**view, "monthly_limit": shown(budget.monthly_limit),
            "thresholds": sorted(budget.thresholds), "hard_stop": budget.hard_stop,
            "percent_used": f"{spend * 100 / budget.monthly_limit:.2f}",
            "stopped": budget.stopped_month == month}


async def set_budget(session: AsyncSession, tenant_id: uuid.UUID, *, monthly_limit: Decimal,
                     thresholds: list[int], hard_stop: bool,
                     now: dt.datetime | None = None) -> TenantBudget:
    """Create or replace the budget; the stop is judged at once against this month's spend
    (a raised limit lifts it now, not at the next check)."""
    now = now or dt.datetime.now(dt.UTC)
    month, _, _ = month_window(now)
    budget = await session.get(TenantBudget, tenant_id, with_for_update=True)
    if budget is None:
        budget = TenantBudget(tenant_id=tenant_id)
        session.add(budget)
    budget.monthly_limit = monthly_limit
    budget.thresholds = sorted(set(thresholds))
    budget.hard_stop = hard_stop
    budget.updated_at = now
    budget.stopped_month = stop_month(budget, await month_to_date(session, tenant_id, now), month)
    await session.flush()
    return budget


async def stopped_tenants(session: AsyncSession, now: dt.datetime | None = None
                          ) -> set[uuid.UUID]:
    month, _, _ = month_window(now or dt.datetime.now(dt.UTC))
    return set((await session.scalars(
        select(TenantBudget.tenant_id).where(TenantBudget.hard_stop.is_(True),
                                             TenantBudget.stopped_month == month))).all())
