"""A month's spend per tenant in two parts, so a budget check every few seconds need not read
the whole month's jobs each time: the **closed** days (before yesterday, UTC), read once per
day and kept, and the **open** ones (yesterday and today), read each time.

A day is closed once no job can still end in it: a job's ``finished_at`` is the clock of the
transaction that ends it, so a job that ended late yesterday may commit just after midnight;
keeping yesterday open covers that. A price change appends a version in force from now, so
it cannot change what closed days cost (only a price row back-dated by hand in SQL could;
restarting the dispatcher reads everything again).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection
from decimal import Decimal

from sqlalchemy.orm import Session

from service.spend.money import next_month
from service.spend.queries import month_spend, spend_lines_sync, utc_midnight


class ClosedDays:
    def __init__(self) -> None:
        self._key: tuple[dt.date, dt.date] | None = None  # (month, first open day)
        self._spend: dict[uuid.UUID, Decimal] = {}
        self._known: set[uuid.UUID] = set()

    def month_spend(self, session: Session, *, month: dt.date, today: dt.date,
                    tenant_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, Decimal]:
        """Each tenant's spend in ``month`` (the month of ``today``) to now."""
        first_open = max(month, today - dt.timedelta(days=1))
        if self._key != (month, first_open):
            self._key, self._spend, self._known = (month, first_open), {}, set()
        missing = set(tenant_ids) - self._known
        if missing and first_open > month:
            closed = month_spend(spend_lines_sync(
                session, start=utc_midnight(month), end=utc_midnight(first_open),
                tenant_ids=missing, detail=False))
            self._spend.update({t: closed.get(t, Decimal(0)) for t in missing})
        self._known |= missing
        open_part = month_spend(spend_lines_sync(
            session, start=utc_midnight(first_open), end=utc_midnight(next_month(month)),
            tenant_ids=tenant_ids, detail=False))
        return {t: self._spend.get(t, Decimal(0)) + open_part.get(t, Decimal(0))
                for t in tenant_ids}
