"""The door's list of tenants stopped by a spent budget (service.spend.stops): read once per
refresh, and past it still answering while one background read renews it, so no request
(a refusal included) waits on that read behind a burst; only the first read, or a list far
too old, is waited on."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from service.spend import stops
from service.spend.stops import STALE_FACTOR, BudgetStops

TENANT = uuid.uuid4()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """The stopped tenants as Postgres has them, each read counted and held until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stopped: set[uuid.UUID] = set()
        self.count = 0
        self.release = asyncio.Event()
        self.release.set()

        async def stopped_tenants(session: Any) -> set[uuid.UUID]:
            self.count += 1
            await self.release.wait()
            return set(self.stopped)

        monkeypatch.setattr(stops, "stopped_tenants", stopped_tenants)


class Session:
    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def _is_stopped(budget: BudgetStops) -> Any:
    return budget.is_stopped(Session, TENANT)  # type: ignore[arg-type]


def test_a_stale_list_answers_at_once_while_one_read_renews_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads, clock = Reads(monkeypatch), Clock()
    budget = BudgetStops(refresh_s=5.0, clock=clock)

    async def run() -> None:
        assert await _is_stopped(budget) is False  # the first read, waited on
        reads.stopped, reads.release = {TENANT}, asyncio.Event()  # a stop, read slowly
        clock.now += 6.0
        answers = await asyncio.wait_for(asyncio.gather(*(
            _is_stopped(budget) for _ in range(20))), timeout=1.0)
        assert answers == [False] * 20  # judged by the old list, without waiting
        assert reads.count == 2  # one read in flight for all of them
        reads.release.set()
        await asyncio.sleep(0.01)
        assert await _is_stopped(budget) is True  # the renewed list
        assert reads.count == 2

    asyncio.run(run())


def test_a_list_far_too_old_is_read_before_answering(monkeypatch: pytest.MonkeyPatch) -> None:
    reads, clock = Reads(monkeypatch), Clock()
    budget = BudgetStops(refresh_s=5.0, clock=clock)

    async def run() -> None:
        assert await _is_stopped(budget) is False
        reads.stopped = {TENANT}
        clock.now += STALE_FACTOR * 5.0  # renewals failing for that long: wait for one
        assert await _is_stopped(budget) is True
        assert reads.count == 2

    asyncio.run(run())
