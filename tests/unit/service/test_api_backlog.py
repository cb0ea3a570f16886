"""The API's own backlog (service/api/api_backlog.py) counts in a request's predicted TTFT:
a burst whose requests spend a second in the API before their rows exist is refused in shed
mode even when the dispatcher's queue looks empty, and the estimate fades on a quiet API."""

from __future__ import annotations

import asyncio
import time

import pytest

from scheduler.outlook import RealtimeOutlook, door_verdict
from service.api.api_backlog import ApiBacklog
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


def idle_outlook(at: float = 0.0) -> RealtimeOutlook:
    return RealtimeOutlook(model="m", at=at, workers=1, slots_total=8, rt_load=0,
                           rt_queued_prefill=0, mean_prompt_tokens=50, job_service_s=1.0,
                           step_s=0.02, prefill_per_token_s=1e-4, prefill_step_s=0.01,
                           token_budget=512)


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


class FixedRedis:
    def __init__(self, value: str) -> None:
        self.value = value

    async def get(self, key: str) -> str:
        return self.value


def test_the_gate_predicts_with_its_backlog_and_for_an_unjudged_request_too():
    async def run() -> None:
        clock = Clock()
        backlog = ApiBacklog(clock=clock)
        gate = SloGate(FixedRedis(encode_outlook(idle_outlook(at=time.time() + 3600))),  # type: ignore[arg-type]
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
