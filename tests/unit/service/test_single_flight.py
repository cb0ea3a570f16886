"""One run per key at a time (service.store.single_flight)."""

from __future__ import annotations

import asyncio

from service.store.single_flight import SingleFlight


def test_callers_during_a_run_share_it_and_a_later_call_starts_another() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    starts: list[str] = []

    async def read(key: str) -> int:
        starts.append(key)
        started = len(starts)
        await asyncio.sleep(0.01)
        return started

    async def run() -> None:
        first = await asyncio.gather(*(flights.run("a", lambda: read("a")) for _ in range(5)),
                                     flights.run("b", lambda: read("b")))
        assert first == [1] * 5 + [2]
        assert not flights.running("a")
        assert await flights.run("a", lambda: read("a")) == 3

    asyncio.run(run())


def test_a_failed_run_nobody_awaits_is_dropped() -> None:
    flights: SingleFlight[None, int] = SingleFlight()

    async def fail() -> int:
        raise ConnectionError("Redis away")

    async def run() -> None:
        flights.run(None, fail)
        await asyncio.sleep(0.01)
        assert not flights.running(None)

    asyncio.run(run())
