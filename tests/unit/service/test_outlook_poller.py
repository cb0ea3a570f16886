"""The outlook poller (service.api.outlook_poller) keeps each model the SLO gate judges fresh in
memory from a thread of its own, so a refusal is judged on an outlook read off the event loop
and never waits on one read behind a burst."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.exceptions import RedisError

from scheduler.outlook import RealtimeOutlook
from service.api.outlook_poller import OutlookPoller
from service.api.slo_gate import SloGate
from service.store.heartbeats import encode_outlook
from service.store.keys import outlook_key


def _outlook(model: str, load: int) -> str:
    return encode_outlook(RealtimeOutlook(
        model=model, at=time.time() + 3600, workers=1, slots_total=4, rt_load=load,
        rt_queued_prefill=0, mean_prompt_tokens=50, job_service_s=1.0, step_s=0.02,
        prefill_per_token_s=1e-4, prefill_step_s=0.01, token_budget=512))


class SyncRedis:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.mgets: list[list[str]] = []
        self.fail = False
        self.closed = False

    def mget(self, keys: list[str]) -> list[str | None]:
        if self.fail:
            raise RedisError("away")
        self.mgets.append(keys)
        return [self.values.get(k) for k in keys]

    def close(self) -> None:
        self.closed = True


class NoRedis:
    """The gate's own (event-loop) Redis: never needed while the poller keeps up."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the gate read Redis on the event loop ({name})")


def test_one_round_reads_every_watched_model_at_once_and_forgets_idle_ones() -> None:
    kept: dict[str, RealtimeOutlook | None] = {}
    redis = SyncRedis({outlook_key("a"): _outlook("a", 3)})
    poller = OutlookPoller(redis, kept.__setitem__, idle_s=0.05)  # type: ignore[arg-type]
    poller.poll()
    assert redis.mgets == []  # nothing judged yet: nothing read
    poller.watch("a")
    poller.watch("b")
    poller.poll()
    assert redis.mgets == [[outlook_key("a"), outlook_key("b")]]
    outlook_a = kept["a"]
    assert outlook_a is not None and outlook_a.rt_load == 3
    assert kept["b"] is None  # no outlook published: the gate admits, as on its own read
    time.sleep(0.06)
    poller.watch("b")
    poller.poll()
    assert redis.mgets[-1] == [outlook_key("b")]  # "a" idle past idle_s


def test_a_failed_read_keeps_what_the_gate_has() -> None:
    kept: dict[str, RealtimeOutlook | None] = {}
    redis = SyncRedis({outlook_key("a"): _outlook("a", 3)})
    poller = OutlookPoller(redis, kept.__setitem__)  # type: ignore[arg-type]
    poller.watch("a")
    redis.fail = True
    poller.poll()
    assert kept == {}


def test_the_gate_judges_on_what_the_thread_read_without_reading_itself() -> None:
    async def run() -> None:
        gate = SloGate(NoRedis())  # type: ignore[arg-type]
        redis = SyncRedis({outlook_key("m"): _outlook("m", 200)})
        gate.poller = OutlookPoller(redis, gate.keep, poll_s=0.005)  # type: ignore[arg-type]
        gate.keep("m", None)  # the gate's first read found nothing yet
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is None  # watched now
        gate.poller.start()
        try:
            deadline = time.monotonic() + 2.0
            while not redis.mgets and time.monotonic() < deadline:
                time.sleep(0.005)  # the thread reads while the event loop is busy
            assert redis.mgets
            assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        finally:
            gate.poller.stop()
        assert redis.closed

    asyncio.run(run())
