"""The hard stop at the door: a tenant whose budget is spent (and set to stop) is refused with
429 ``insufficient_quota``, as OpenAI refuses an account out of credit. The set of stopped
tenants is read from Postgres at most every ``refresh_s`` per API process (one small query,
not one per request), so a stop set by the budget check binds within that much more and one
read. Past ``refresh_s`` the set still answers while one background read renews it: every
request waited on that read, in a burst behind the whole burst (refusals at the door too).
Only a first read, or a set ``STALE_FACTOR`` times too old (reads failing), is waited on.

This module is a route dependency only: generating routes list it; reads, cancels and files
stay open to a stopped tenant.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.spend.budgets import month_window, stopped_tenants
from service.store.single_flight import SingleFlight
from service.web.deps import CurrentTenant, SettingsDep
from service.web.errors import APIError

BUDGET_SPENT = ("You exceeded your current quota: this month's budget for your organization is "
                "spent. Ask your administrator to raise the budget; requests are accepted "
                "again when it is raised or the month ends (UTC).")


# How many refresh periods old a set may answer while its renewal runs, before requests wait.
STALE_FACTOR = 3.0


class BudgetStops:
    def __init__(self, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self.clock = clock
        self._stopped: set[uuid.UUID] = set()
        self._read_at: float | None = None
        self._reads: SingleFlight[None, None] = SingleFlight()  # one read, however many ask

    async def is_stopped(self, sessions: async_sessionmaker[AsyncSession],
                         tenant_id: uuid.UUID) -> bool:
        age = None if self._read_at is None else self.clock() - self._read_at
        if age is None or age >= STALE_FACTOR * self.refresh_s:
            await self._reads.run(None, lambda: self._read(sessions))
        elif age >= self.refresh_s:
            self._reads.run(None, lambda: self._read(sessions))  # in the background
        return tenant_id in self._stopped

    async def _read(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        async with sessions() as session:
            self._stopped = await stopped_tenants(session)
        self._read_at = self.clock()


def budget_stops(request: Request, refresh_s: float) -> BudgetStops:
    state = request.app.state
    stops: BudgetStops | None = getattr(state, "budget_stops", None)
    if stops is None:
        stops = state.budget_stops = BudgetStops(refresh_s)
    return stops


async def refuse_when_budget_spent(request: Request, tenant: CurrentTenant,
                                   settings: SettingsDep) -> None:
    stops = budget_stops(request, settings.spend.stop_refresh_seconds)
    if await stops.is_stopped(request.app.state.sessionmaker, tenant.id):
        # Not worth retrying before the month ends (Retry-After), and the SDKs retry a 429
        # unless told not to.
        raise APIError(429, BUDGET_SPENT, code="insufficient_quota", type_="insufficient_quota",
                       headers={"x-should-retry": "false",
                                "retry-after": str(seconds_to_month_end())}, reason="budget")


def seconds_to_month_end(now: dt.datetime | None = None) -> int:
    now = now or dt.datetime.now(dt.UTC)
    _, _, end = month_window(now)
    return max(1, int((end - now).total_seconds()))


# For a generating route's `dependencies=[...]`.
BUDGET_OPEN = Depends(refuse_when_budget_spent)
