"""The waiting room's rules without services: who enters, when a stay ends (a worker came, the
job was taken, or the bound passed), what the expired request gets, the relay's keep-alives,
and the SLO gate admitting a model with no outlook (at zero workers) instead of refusing it."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from service.api.relay import KeepAlive, RelayPace, TimedOut, follow_job
from service.api.slo_gate import SloGate
from service.api.waiting_room import RETRY_AFTER_S, UNAVAILABLE, WaitingRoom
from service.store.settings import Settings
from service.store.settings_groups import ApiSettings
from service.web.errors import APIError


class Catalog:
    def __init__(self, served: bool = False) -> None:
        self.served = served
        self.fresh_reads = 0

    async def serves(self, model: str, *, fresh: bool = False) -> bool:
        self.fresh_reads += fresh
        return self.served


class Room(WaitingRoom):
    """The waiting room with its job write replaced: ``taken`` says a worker has the job."""

    def __init__(self, catalog: Catalog, bound_s: float, taken: bool = False) -> None:
        settings = Settings(api=ApiSettings(waiting_room_seconds=bound_s))
        super().__init__(SimpleNamespace(catalog=catalog), settings, poll_s=0.01)
        self.taken = taken
        self.ended: list[uuid.UUID] = []

    async def _end(self, job_id: uuid.UUID, model: str, message: str) -> bool:
        if self.taken:
            return False
        self.ended.append(job_id)
        return True


def test_a_served_model_or_no_room_enters_nobody() -> None:
    async def run() -> None:
        assert not (await Room(Catalog(served=True), 5.0).enter(uuid.uuid4(), "m")).waiting
        assert not (await Room(Catalog(), 0.0).enter(uuid.uuid4(), "m")).waiting

    asyncio.run(run())


def test_no_worker_within_the_bound_ends_the_job_with_a_503_and_retry_after() -> None:
    async def run() -> None:
        refunds: list[bool] = []

        async def refund() -> None:
            refunds.append(True)

        room, job = Room(Catalog(), 0.05), uuid.uuid4()
        watch = await room.enter(job, "cold", on_expired=refund)
        assert watch.waiting and watch.keepalive_s is not None
        await watch.settle(1.0)
        error = watch.expired
        assert isinstance(error, APIError)
        assert error.status == 503 and error.code == UNAVAILABLE
        assert error.headers == {"Retry-After": str(RETRY_AFTER_S)}
        assert room.ended == [job] and refunds == [True]

    asyncio.run(run())


def test_a_worker_that_comes_in_time_ends_the_stay_and_the_job_runs() -> None:
    async def run() -> None:
        catalog = Catalog()
        room = Room(catalog, 5.0)
        watch = await room.enter(uuid.uuid4(), "cold")
        await asyncio.sleep(0.05)
        catalog.served = True
        await watch.settle(1.0)
        assert watch.expired is None and room.ended == []
        assert catalog.fresh_reads >= 1

    asyncio.run(run())


def test_a_job_a_worker_took_at_the_bound_is_not_ended() -> None:
    async def run() -> None:
        room = Room(Catalog(), 0.05, taken=True)
        watch = await room.enter(uuid.uuid4(), "cold")
        await watch.settle(1.0)
        assert watch.expired is None

    asyncio.run(run())


def test_a_failed_end_is_logged_and_leaves_the_request_to_its_relay(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Room):
        async def _end(self, job_id: uuid.UUID, model: str, message: str) -> bool:
            raise ConnectionError("postgres away")

    async def run() -> None:
        watch = await Broken(Catalog(), 0.05).enter(uuid.uuid4(), "cold")
        await watch.settle(1.0)
        await asyncio.sleep(0)  # the done callback
        assert watch.expired is None

    asyncio.run(run())
    assert "ending an unserved job failed" in caplog.text


def test_a_stream_is_held_for_a_short_wait_and_gets_the_503_as_its_status() -> None:
    async def run() -> None:
        finished: list[bool] = []
        obs = SimpleNamespace(finished=lambda ok: finished.append(ok))
        watch = await Room(Catalog(), 0.05).enter(uuid.uuid4(), "cold")
        with pytest.raises(APIError) as caught:
            await watch.before_stream(obs)
        assert caught.value.status == 503 and finished == [False]

    asyncio.run(run())


def test_closing_the_request_stops_the_watch() -> None:
    async def run() -> None:
        room = Room(Catalog(), 5.0)
        watch = await room.enter(uuid.uuid4(), "cold")
        watch.close()
        await asyncio.sleep(0.05)
        assert watch.expired is None and room.ended == []

    asyncio.run(run())


class QuietRedis:
    async def xread(self, streams: dict[str, str], count: int, block: int) -> Any:
        await asyncio.sleep(block / 1000)
        return []


def test_the_relay_sends_keep_alives_only_when_asked() -> None:
    async def kinds(keepalive_s: float | None) -> list[str]:
        return [type(ev).__name__ async for ev in follow_job(
            QuietRedis(), uuid.uuid4(), timeout_s=0.2,  # type: ignore[arg-type]
            pace=RelayPace(block_ms=10), keepalive_s=keepalive_s)]

    with_keepalive = asyncio.run(kinds(0.05))
    assert with_keepalive[-1] == TimedOut.__name__
    assert with_keepalive.count(KeepAlive.__name__) >= 2
    assert asyncio.run(kinds(None)) == [TimedOut.__name__]


class NoOutlookRedis:
    async def get(self, key: str) -> None:
        return None


def test_the_slo_gate_admits_a_model_at_zero_workers_rather_than_refuse_it() -> None:
    # A pool with no worker publishes no outlook: the door admits, and the request waits in
    # the waiting room instead of getting a 429.
    async def run() -> None:
        gate = SloGate(NoOutlookRedis())  # type: ignore[arg-type]
        verdict = await gate.judge("cold", prompt_tokens=100, target_s=0.5)
        assert verdict is None

    asyncio.run(run())
