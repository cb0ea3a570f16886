"""The budget check's month in two parts (service.spend.closed_days): days before yesterday are
read once and kept, yesterday and today every time; a new day or month reads again."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal

from service.spend.closed_days import ClosedDays
from service.store.db import sync_session
from service.store.models.spend import ModelPrice
from service.store.settings import Settings
from tests.support.spend import ended_job

M = 1_000_000


def at(day: dt.date, hour: int = 12) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour), tzinfo=dt.UTC)


def test_closed_days_are_read_once_open_days_every_time(
        settings: Settings, make_tenant: Callable[..., tuple[uuid.UUID, str]]) -> None:
    url = settings.database_url
    tenant, _ = make_tenant("closed")
    month = (dt.datetime.now(dt.UTC).date().replace(day=1) - dt.timedelta(days=1)).replace(day=1)
    model = f"closed-{uuid.uuid4().hex[:8]}"
    with sync_session(url) as session:  # 1 per million tokens, from before that month
        session.add(ModelPrice(model=model, input_per_mtok=1, output_per_mtok=1,
                               batch_discount_pct=50, flex_discount_pct=50, created_by="pytest",
                               effective_from=at(month - dt.timedelta(days=1))))
        session.commit()
    today = month + dt.timedelta(days=9)
    ended_job(url, tenant, model, prompt_tokens=2 * M, completion_tokens=0,
              finished_at=at(month + dt.timedelta(days=2)))  # closed: 2.00
    ended_job(url, tenant, model, prompt_tokens=M, completion_tokens=0,
              finished_at=at(today - dt.timedelta(days=1), 23))  # yesterday, open: 1.00
    closed = ClosedDays()

    def spend(day: dt.date) -> Decimal:
        with sync_session(url) as session:
            return closed.month_spend(session, month=month, today=day, tenant_ids=[tenant])[tenant]

    assert spend(today) == Decimal(3)
    # Written into a closed day behind the cache's back (no real job can): not read again...
    ended_job(url, tenant, model, prompt_tokens=4 * M, completion_tokens=0,
              finished_at=at(month + dt.timedelta(days=3)))
    # ...while a job of today is.
    ended_job(url, tenant, model, prompt_tokens=M, completion_tokens=0, finished_at=at(today))
    assert spend(today) == Decimal(4)
    # The next day closes another day and reads the closed part again: all of it.
    assert spend(today + dt.timedelta(days=1)) == Decimal(8)
    # Another tenant added later has its own closed part read.
    other, _ = make_tenant("closed-other")
    ended_job(url, other, model, prompt_tokens=M, completion_tokens=0,
              finished_at=at(month + dt.timedelta(days=1)))
    with sync_session(url) as session:
        both = closed.month_spend(session, month=month, today=today + dt.timedelta(days=1),
                                  tenant_ids=[tenant, other])
    assert both == {tenant: Decimal(8), other: Decimal(1)}
