"""The door's predictions are scaled by what first tokens took against them, per model."""

from __future__ import annotations

import asyncio
import math
import random
import time

import pytest

from scheduler.outlook import RealtimeOutlook, door_verdict
from scheduler.ttft_calibration import TtftCalibration
from service.api.slo_gate import SloGate
from service.api.ttft_calibration import calibrating
from service.store.heartbeats import encode_outlook


def test_the_factor_tracks_the_ratios_high_quantile_per_model_within_bounds():
    cal = TtftCalibration()
    assert cal.factor("m") == 1.0
    rng = random.Random(3)
    ratios = [math.exp(rng.gauss(math.log(0.2), 0.4)) for _ in range(3000)]
    for r in ratios:  # predicted about five times too high, spread as on the sim stack
        cal.observe("m", actual_s=0.4 * r, raw_predicted_s=0.4)
    q90 = sorted(ratios)[int(0.9 * len(ratios))]
    assert cal.factor("m") == pytest.approx(q90, rel=0.15)
    for _ in range(500):
        cal.observe("m", actual_s=0.001, raw_predicted_s=10.0)
    assert cal.factor("m") == pytest.approx(0.1)  # the lower bound: the profile is wrong
    assert cal.factor("other") == 1.0
    cal.observe("m", actual_s=0.0, raw_predicted_s=0.4)  # nothing to learn
    assert cal.observed["m"] == 3500


def outlook(load: int) -> RealtimeOutlook:
    return RealtimeOutlook(model="m", at=time.time() + 3600, workers=1, slots_total=4,
                           rt_load=load, rt_queued_prefill=0, mean_prompt_tokens=50,
                           job_service_s=1.0, step_s=0.02, prefill_per_token_s=1e-3,
                           prefill_step_s=0.01, token_budget=512)


def test_a_calibrated_verdict_admits_what_the_raw_one_refused():
    raw = door_verdict(outlook(6), prompt_tokens=200, target_s=0.5)
    assert raw.retry_after is not None  # ~0.98 s predicted against a 0.35 s bar
    calibrated = door_verdict(outlook(6), prompt_tokens=200, target_s=0.5, calibration=0.25)
    assert calibrated.retry_after is None
    assert calibrated.raw_predicted_s == pytest.approx(raw.predicted_ttft_s)


def test_a_factor_learned_under_load_does_not_make_a_loaded_pool_look_hopeless():
    """The idle exemption (a target missed even on an idle pool is admitted, refusing it
    relieves nothing) judges the idle pool by the profile, not by a factor learned from
    loaded first tokens: scaled by it, every request looked hopeless under load and was
    admitted (the simulator at 2x: 1 s-target requests predicted at 3 s let in)."""
    idle_s = 0.2 + 0.01  # 200 prompt tokens at 1 ms each, one prefill step
    factor = 4.0  # idle_s * factor is past the 0.7 s bar of a 1 s target
    verdict = door_verdict(outlook(6), prompt_tokens=200, target_s=1.0, calibration=factor)
    assert idle_s * factor > 0.7 and idle_s < 0.7
    assert verdict.retry_after is not None


class FixedRedis:
    def __init__(self, value: str) -> None:
        self.value = value

    async def get(self, key: str) -> str:
        return self.value


def test_first_tokens_reported_through_the_observer_calibrate_the_gate():
    async def run() -> tuple[int | None, int | None]:
        gate = SloGate(FixedRedis(encode_outlook(outlook(6))))  # type: ignore[arg-type]
        before = await gate.judge("m", prompt_tokens=200, target_s=0.5, count=False)
        assert before is not None and before.retry_after is not None
        for _ in range(400):  # first tokens came at a fifth of the prediction
            obs = calibrating(NullObs(), gate=gate, model="m",
                              predicted_ttft_s=before.predicted_ttft_s,
                              started=time.perf_counter() - before.predicted_ttft_s / 5)
            obs.first_token()
            obs.first_token()  # told once
        after = await gate.judge("m", prompt_tokens=200, target_s=0.5, count=False)
        assert after is not None
        return before.retry_after, after.retry_after

    before, after = asyncio.run(run())
    assert before is not None and after is None


class NullObs:
    def first_token(self) -> None:
        pass


def test_a_queueing_plan_is_judged_uncalibrated():
    """A factor learned on first tokens does not scale a queueing plan's long waits, against
    its wait budget or its deadline."""
    long_queue = outlook(40)  # ~9 s of slots ahead of a new job on 4 slots of 1 s jobs
    assert door_verdict(long_queue, prompt_tokens=50, target_s=600.0,
                        max_wait_s=20.0).retry_after is None
    assert door_verdict(long_queue, prompt_tokens=50, target_s=600.0, max_wait_s=20.0,
                        calibration=5.0).retry_after is None
    assert door_verdict(long_queue, prompt_tokens=50, target_s=15.0, max_wait_s=20.0,
                        calibration=5.0).retry_after is None  # ~9.6 s, within 0.7 x 15 s
