"""The API's own backlog (service/api/api_backlog.py) counts in a request's predicted TTFT:
a burst whose requests spend a second in the API before their rows exist is refused in shed
mode even when the dispatcher's queue looks empty, and the estimate fades on a quiet API."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from scheduler.outlook import RealtimeOutlook, door_verdict
from service.api.api_backlog import ApiBacklog, LoopLag
from service.api.slo_gate import SloGate
from service.store.heartbeats import encode_outlook


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_estimate_follows_a_burst_then_fades_when_quiet():
    clock = Clock()
    backlog = ApiBacklog(clock=clock)
    assert backlog.delay_s() == 0.0
    for _ in range(20):  # requests that each spent 1.2 s in the API
        backlog.stored(clock.now - 1.2)
    assert backlog.delay_s() == pytest.approx(1.2, rel=0.02)
    backlog.stored(clock.now - 0.004)  # one quick request moves it a little
    assert backlog.delay_s() > 0.9
    clock.now += 5.0  # five quiet half-lives
    assert backlog.delay_s() < 0.05
    backlog.stored(None)  # arrival unknown: nothing learnt
    assert backlog.delay_s() < 0.05


def outlook(*, load: int = 0, slots: int = 8, at: float | None = None) -> RealtimeOutlook:
    """A pool of ``slots`` with ``load`` realtime jobs; computed at ``at`` (default: an hour
    ahead, so an API's admissions since never age out of it)."""
    return RealtimeOutlook(model="m", at=time.time() + 3600 if at is None else at, workers=1,
                           slots_total=slots, rt_load=load, rt_queued_prefill=0,
                           mean_prompt_tokens=50, job_service_s=1.0, step_s=0.02,
                           prefill_per_token_s=1e-4, prefill_step_s=0.01, token_budget=512)


def idle_outlook() -> RealtimeOutlook:
    return outlook(at=0.0)


def test_the_api_delay_is_part_of_the_prediction_and_can_refuse_in_shed_mode():
    calm = door_verdict(idle_outlook(), prompt_tokens=50, target_s=1.0)
    assert calm.retry_after is None and calm.predicted_ttft_s < 0.1
    busy = door_verdict(idle_outlook(), prompt_tokens=50, target_s=1.0, api_delay_s=0.9)
    assert busy.predicted_ttft_s == pytest.approx(calm.predicted_ttft_s + 0.9)
    assert busy.retry_after == 1
    # In queue mode it is part of the wait, judged against the wait budget.
    queued = door_verdict(idle_outlook(), prompt_tokens=50, target_s=600.0, max_wait_s=30.0,
                          api_delay_s=0.9)
    assert queued.retry_after is None


def test_the_gate_predicts_with_its_backlog_and_for_an_unjudged_request_too():
    async def run() -> None:
        clock = Clock()
        backlog = ApiBacklog(clock=clock)
        gate = SloGate(CountingRedis(encode_outlook(outlook())),  # type: ignore[arg-type]
                       backlog)
        first = await gate.judge("m", prompt_tokens=50, target_s=1.0, tenant="t")
        assert first is not None and first.retry_after is None
        for _ in range(30):
            backlog.stored(clock.now - 2.0)
        later = await gate.judge("m", prompt_tokens=50, target_s=1.0, tenant="t")
        assert later is not None and later.retry_after is not None
        assert later.predicted_ttft_s > first.predicted_ttft_s + 1.5
        unjudged = gate.predicted_ttft_s("m", prompt_tokens=50, tenant="t")
        assert unjudged == pytest.approx(later.predicted_ttft_s, rel=0.05)
        assert gate.predicted_ttft_s("other-model", prompt_tokens=50, tenant="t") is None

    asyncio.run(run())


def test_the_loop_lag_shows_a_blocked_loop_and_fades():
    async def run() -> tuple[float, float]:
        lag = LoopLag(tick_s=0.005)
        lag.start()
        await asyncio.sleep(0.03)
        time.sleep(0.1)  # the loop is blocked, as by a burst's work
        await asyncio.sleep(0.002)  # the ticker, overdue, runs first
        during = lag.lag_s()
        await asyncio.sleep(0.3)
        after = lag.lag_s()
        await lag.stop()
        return during, after

    during, after = asyncio.run(run())
    assert during >= 0.08
    assert after < 0.02


def test_the_backlog_adds_the_loop_lag_to_the_stored_requests_time():
    clock = Clock()
    lag = LoopLag()
    backlog = ApiBacklog(clock=clock, loop_lag=lag)
    for _ in range(30):
        backlog.stored(clock.now - 0.2)
    lag.observe(0.5)
    assert backlog.delay_s() == pytest.approx(0.7, rel=0.02)


def test_a_lagging_loop_refuses_on_the_outlook_at_hand(monkeypatch: pytest.MonkeyPatch):
    """While the loop lags, an outlook a little past REFRESH_S still refuses at once: a new
    read would cost the lag before its answer is seen."""
    from service.api import slo_gate
    monkeypatch.setattr(slo_gate, "REFRESH_S", 0.01)

    async def run() -> tuple[int, int]:
        redis = CountingRedis(encode_outlook(outlook(load=200, slots=4)))
        lag = LoopLag()
        gate = SloGate(redis, ApiBacklog(loop_lag=lag))  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        await asyncio.sleep(0.03)  # past REFRESH_S
        calm_reads = redis.gets
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        reads_when_calm = redis.gets - calm_reads  # a stale outlook's refusal re-reads
        await asyncio.sleep(0.03)
        lag.observe(0.2)  # the loop is 200 ms behind
        before = redis.gets
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        return reads_when_calm, redis.gets - before

    calm, lagging = asyncio.run(run())
    assert calm == 1 and lagging == 0


class CountingRedis:
    def __init__(self, value: str) -> None:
        self.value = value
        self.gets = 0

    async def get(self, key: str) -> str:
        self.gets += 1
        return self.value


def test_in_a_burst_a_stale_outlook_refuses_what_its_age_cannot_change(
        monkeypatch: pytest.MonkeyPatch):
    """Outside a burst a stale outlook's refusal is judged again on a fresh read (a pool may
    have gone quiet); with the door full, one far past the target refuses at once."""
    from service.api import slo_gate
    monkeypatch.setattr(slo_gate, "REFRESH_S", 0.01)

    async def run() -> tuple[int, int]:
        redis = CountingRedis(encode_outlook(outlook(load=200, slots=4)))
        backlog = ApiBacklog()
        gate = SloGate(redis, backlog)  # type: ignore[arg-type]
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        await asyncio.sleep(0.03)
        before = redis.gets
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        quiet_reads = redis.gets - before
        await asyncio.sleep(0.03)
        backlog.judging = 10  # a burst in the door
        before = redis.gets
        assert await gate.check("m", prompt_tokens=50, target_s=1.0) is not None
        return quiet_reads, redis.gets - before

    quiet, burst = asyncio.run(run())
    assert quiet == 1  # the refusal waited on a fresh read
    assert burst == 0  # refused at once; the background refresh only starts afterwards


def test_requests_between_the_looks_count_ahead_of_a_new_one():
    """A burst whose first looks all pass before any is counted: each request waiting on its
    quota counts ahead of the next look, so the burst is refused before the quota script."""
    async def run() -> tuple[int | None, int | None, int | None]:
        gate = SloGate(CountingRedis(encode_outlook(outlook(slots=4))))  # type: ignore[arg-type]
        alone = await gate.check("m", prompt_tokens=50, target_s=1.0, count=False)
        with contextlib.ExitStack() as stack:
            for _ in range(40):
                stack.enter_context(gate.on_the_way("m"))
            crowded = await gate.check("m", prompt_tokens=50, target_s=1.0, count=False)
        after = await gate.check("m", prompt_tokens=50, target_s=1.0, count=False)
        return alone, crowded, after

    alone, crowded, after = asyncio.run(run())
    assert alone is None and crowded is not None and after is None
