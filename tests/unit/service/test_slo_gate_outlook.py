"""The SLO gate never makes a request wait on Redis to be admitted by a stale outlook: it goes
on with the last one read while a single background read refreshes it
(service/api/slo_gate.py). A stale outlook never refuses, though: a refusal is judged again on
a fresh read, shared by every request waiting on it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from scheduler.outlook import RealtimeOutlook
from service.api import slo_gate
from service.api.slo_gate import SloGate
from service.store.heartbeats import encode_outlook


def _outlook(load: int) -> str:
    return encode_outlook(RealtimeOutlook(
        model="m", at=time.time() + 3600, workers=1, slots_total=4, rt_load=load,
        rt_queued_prefill=0, mean_prompt_tokens=50, job_service_s=1.0, step_s=0.02,
        prefill_per_token_s=1e-4, prefill_step_s=0.01, token_budget=512))


class SlowRedis:
    """A Redis whose GETs wait for ``release`` (set at once unless ``hold``)."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.gets = 0
        self.release = asyncio.Event()
        self.release.set()

    async def get(self, key: str) -> Any:
        self.gets += 1
        await self.release.wait()
        return self.value


def test_a_stale_outlook_is_used_while_one_read_refreshes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slo_gate, "REFRESH_S", 0.01)

    async def run() -> None:
        redis = SlowRedis(_outlook(0))
        gate = SloGate(redis)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None  # read, awaited
        assert redis.gets == 1
        await asyncio.sleep(0.02)  # now stale
        redis.value, redis.release = _outlook(200), asyncio.Event()  # Redis is slow now
        answers = await asyncio.wait_for(asyncio.gather(*(
            gate.check("m", prompt_tokens=50, target_s=1.0, count=False)
            for _ in range(20))), timeout=1.0)
        assert answers == [None] * 20  # judged by the last outlook, without waiting
        assert redis.gets == 2  # one read in flight for all of them
        redis.release.set()
        await asyncio.sleep(0.01)
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None  # overloaded

    asyncio.run(run())


def test_a_first_or_very_old_outlook_is_read_before_judging(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slo_gate, "REFRESH_S", 0.005)
    monkeypatch.setattr(slo_gate, "STALE_S", 0.01)

    async def run() -> None:
        redis = SlowRedis(_outlook(200))
        gate = SloGate(redis)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        redis.value = _outlook(0)
        await asyncio.sleep(0.06)  # past REFRESH_S and STALE_S: too old to judge by
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None
        assert redis.gets == 2

    asyncio.run(run())


def test_a_stale_busy_outlook_never_refuses_on_a_pool_gone_quiet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request soon after a busy moment (CI: one real-engine test right after another) was
    refused by the outlook read during that moment."""
    monkeypatch.setattr(slo_gate, "REFRESH_S", 0.01)

    async def run() -> None:
        redis = SlowRedis(_outlook(200))
        gate = SloGate(redis)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None  # busy
        redis.value = _outlook(0)  # the pool has gone quiet
        await asyncio.sleep(0.02)
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None
        assert redis.gets == 2

    asyncio.run(run())


def test_no_outlook_yet_is_looked_at_again_sooner_than_a_present_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At start-up the first requests can come before the dispatcher's first outlook; an empty
    read kept as long as a real one let a whole burst in (CI: nothing was shed)."""
    monkeypatch.setattr(slo_gate, "ABSENT_REFRESH_S", 0.01)

    async def run() -> None:
        redis = SlowRedis(None)  # type: ignore[arg-type]
        gate = SloGate(redis)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None  # nothing to judge
        redis.value = _outlook(200)  # the dispatcher's first outlook: overloaded
        await asyncio.sleep(0.02)  # past ABSENT_REFRESH_S, well inside REFRESH_S
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        assert redis.gets == 2

    asyncio.run(run())


def test_a_quiet_services_next_request_waits_on_no_read() -> None:
    """Seconds after the last request (well past REFRESH_S, within STALE_S) a quiet outlook
    admits at once while one background read refreshes it."""
    async def run() -> None:
        redis = SlowRedis(_outlook(0))
        gate = SloGate(redis)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None
        at, outlook = gate._outlooks["m"]
        gate._outlooks["m"] = (at - 5.0, outlook)  # five seconds of quiet
        redis.release = asyncio.Event()  # a read now would not answer
        assert await asyncio.wait_for(
            gate.check("m", prompt_tokens=50, target_s=1.0), timeout=0.5) is None
        assert redis.gets == 2  # the refresh is under way, in the background
        redis.release.set()

    asyncio.run(run())
