"""The step phase lock (worker.engine.vllm_guard, point 3) on vLLM's real scheduler, on the
CPU: a capped step's batch chunk is what ``chunk_for_grid`` gives for the step's time on the
grid, a chunk of 0 schedules no batch prefill, the correction follows measured step times,
and with the lock off the guard's fixed chunk stands."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed")

from vllm.v1.core.sched.scheduler import Scheduler

from scheduler.step_phase import PhaseGrid, chunk_for_grid
from tests.unit.worker.engine.vllm_sched_support import (
    BATCH,
    MakeSched,
    batch_pool,
    make_sched,
    model_dir,
    request,
    step,
)
from worker.engine import vllm_guard
from worker.engine.vllm_preempt import PreemptiveAsyncScheduler, PreemptiveScheduler

__all__ = ["make_sched", "model_dir"]  # fixtures, imported for pytest

CHUNK = 32  # the guard's chunk: the lock sizes chunks up to twice this
PERIOD, OFFSET = 0.1, 0.025
# Round numbers, large enough that each term moves the chunk by whole tokens.
COST = {
    "step_base_s": 0.010,
    "decode_per_seq_s": 0.001,
    "decode_per_ctx_token_s": 1e-4,
    "prefill_per_token_s": 0.001,
}
PHASE = {
    vllm_guard.PHASE_PERIOD_KEY: PERIOD,
    vllm_guard.PHASE_OFFSET_KEY: OFFSET,
    vllm_guard.PHASE_COST_KEY: COST,
}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(1000.0)
    monkeypatch.setattr(vllm_guard, "wall_clock", c)
    return c


def prefilling_mix(
    make_sched: MakeSched, cls: type = PreemptiveScheduler, extra: dict[str, Any] | None = None
) -> Any:
    """Three batch requests decoding behind a long batch prefill ("long", first in vLLM's
    running order, so only pausing it keeps it from the decodes' budget). The guard and the
    lock are off while it is set up, so the lock starts with no sample and correction 1."""
    extra = PHASE if extra is None else extra
    sched = make_sched(cls, max_num_seqs=8, guard_chunk=CHUNK, extra=extra)
    lock, sched.phase_lock, sched.guard_chunk_tokens = sched.phase_lock, None, 0
    config = sched.scheduler_config
    config.long_prefill_token_threshold, sched.adaptive_long_prefill_threshold = 40, False
    for r in [request("long", BATCH, 600, arrival=-1.0), *batch_pool(3)]:
        sched.add_request(r)
    for _ in range(3):
        step(sched)
    config.long_prefill_token_threshold, sched.adaptive_long_prefill_threshold = 0, True
    sched.phase_lock, sched.guard_chunk_tokens = lock, CHUNK
    assert [r.request_id for r in sched.running] == ["long", "b0", "b1", "b2"]
    assert all(r.num_output_tokens for r in sched.running[1:])
    assert sched.requests["long"].num_computed_tokens == 120
    return sched


def decoding(sched: Any) -> list[Any]:
    return [r for r in sched.running if vllm_guard._pending(r) <= 1]


def fixed_s(sched: Any) -> float:
    """The profile's time for the step's decodes (what the lock predicts besides the chunk)."""
    dec = decoding(sched)
    ctx = sum(r.num_computed_tokens for r in dec)
    return (
        COST["step_base_s"]
        + COST["decode_per_seq_s"] * len(dec)
        + COST["decode_per_ctx_token_s"] * ctx
    )


def expected_chunk(sched: Any, now: float, correction: float = 1.0) -> int:
    grid = PhaseGrid(PERIOD, OFFSET)
    per_token = COST["prefill_per_token_s"] * correction
    return chunk_for_grid(grid, now, fixed_s(sched) * correction, per_token, 2 * CHUNK)


def batch_prefill(out: Any) -> int:
    return sum(n for n in out.num_scheduled_tokens.values() if n > 1)


@pytest.mark.parametrize("cls", [PreemptiveScheduler, PreemptiveAsyncScheduler])
@pytest.mark.parametrize(
    ("t", "want"),
    # The decodes take 10 + 3 + 12.6 (3 x 42 context tokens) = 25.6 ms; 1 ms per prefill
    # token; grid points at 1000.025, 1000.125, ...
    [
        (1000.08, 19),  # decodes end at .1056: 19.4 ms to .125
        (1000.05, 49),  # more than the guard's chunk
        (1000.0, 2 * CHUNK),  # .0256 just misses .025: 99 ms to .125, capped at twice the chunk
    ],
    ids=["under-the-guard-chunk", "over-the-guard-chunk", "capped-at-twice-the-chunk"],
)
def test_locked_step_takes_the_chunk_that_ends_it_on_the_grid(
    make_sched: MakeSched, clock: Clock, cls: type, t: float, want: int
) -> None:
    sched = prefilling_mix(make_sched, cls)
    assert fixed_s(sched) == pytest.approx(0.0256)
    clock.t = t
    assert expected_chunk(sched, t) == want
    out = step(sched)
    assert out.num_scheduled_tokens["long"] == want
    assert {"b0", "b1", "b2"} <= set(out.num_scheduled_tokens)
    assert sched.num_guard_phase_steps == 1 and sched.num_guard_capped_steps == 1
    # Everything the guard changed for the step is back.
    assert sched.max_num_scheduled_tokens == 2048
    assert sched.scheduler_config.long_prefill_token_threshold == 0


def test_chunk_zero_pauses_every_batch_prefill(make_sched: MakeSched, clock: Clock) -> None:
    sched = prefilling_mix(make_sched)
    sched.add_request(request("b-wait", BATCH, 50, arrival=9.0))
    grid = PhaseGrid(PERIOD, OFFSET)
    # The decodes alone end half a token's time before the grid point.
    clock.t = grid.next_point(1000.0) - fixed_s(sched) - COST["prefill_per_token_s"] / 2
    assert expected_chunk(sched, clock.t) == 0
    before = sched.requests["long"].next_decode_eligible_step
    out = step(sched)
    assert out.num_scheduled_tokens == {"b0": 1, "b1": 1, "b2": 1}  # no prefill, no admission
    assert sched.num_guard_phase_steps == 1
    assert sched.requests["long"].next_decode_eligible_step == before
    assert sched.max_num_scheduled_tokens == 2048
    # The next step is a full period from its grid point again: batch prefill resumes.
    clock.t += 0.02
    out = step(sched)
    assert out.num_scheduled_tokens["long"] == 2 * CHUNK


def test_correction_follows_a_slower_step_and_scales_the_prediction(
    make_sched: MakeSched, clock: Clock
) -> None:
    sched = prefilling_mix(make_sched)
    lock = sched.phase_lock
    corrections = []
    for _ in range(5):
        out = step(sched)
        corrections.append(lock.correction)  # what sized this step
        # The prediction is the profile's time for the step as scheduled, uncorrected.
        want = fixed_s_after(out, sched) + COST["prefill_per_token_s"] * batch_prefill(out)
        assert lock.last_predicted_s == pytest.approx(want)
        clock.t += 2 * lock.last_predicted_s  # this GPU takes twice the profile's time
    assert corrections == pytest.approx([1.0, 1.2, 1.36, 1.488, 1.5904])
    # The next step's chunk is sized with the next correction, decodes and prefill alike.
    correction = 1.5904 + 0.2 * (2 - 1.5904)
    chunk = expected_chunk(sched, clock.t, correction)
    assert chunk != expected_chunk(sched, clock.t)
    out = step(sched)
    assert lock.correction == pytest.approx(correction)
    assert out.num_scheduled_tokens["long"] == chunk


def fixed_s_after(out: Any, sched: Any) -> float:
    """fixed_s for a step already scheduled: its decodes are the one-token entries."""
    dec = [r for r, n in out.num_scheduled_tokens.items() if n == 1]
    ctx = sum(sched.requests[r].num_computed_tokens - 1 for r in dec)
    return (
        COST["step_base_s"]
        + COST["decode_per_seq_s"] * len(dec)
        + COST["decode_per_ctx_token_s"] * ctx
    )


def test_correction_clamps_outliers_and_skips_idle_gaps() -> None:
    lock = vllm_guard.PhaseLock(PhaseGrid(PERIOD), COST)
    lock.stepped(10.0, num_decode=2, ctx_tokens=0, prefill_tokens=8)
    predicted = lock.last_predicted_s
    assert predicted == pytest.approx(0.010 + 0.002 + 0.008)
    lock.observe(10.0 + 100 * predicted, idle=False)  # counts as 4x
    assert lock.correction == pytest.approx(1 + 0.2 * 3)
    lock.stepped(20.0, num_decode=2, ctx_tokens=0, prefill_tokens=8)
    lock.observe(30.0, idle=True)  # nothing was running: the engine may have slept
    lock.observe(30.1, idle=False)  # and that sample is gone
    assert lock.correction == pytest.approx(1.6)
    lock.stepped(40.0, num_decode=0, ctx_tokens=0, prefill_tokens=0)  # empty: no sample
    lock.observe(41.0, idle=False)
    assert lock.correction == pytest.approx(1.6)


def test_lock_off_keeps_the_guards_fixed_chunk(make_sched: MakeSched, clock: Clock) -> None:
    for extra in ({}, {**PHASE, vllm_guard.PHASE_PERIOD_KEY: 0.0}):
        sched = prefilling_mix(make_sched, extra=extra)
        assert sched.phase_lock is None
        clock.t = 1000.0  # locked, this time would take a different chunk (see above)
        for _ in range(2):
            out = step(sched)
            assert out.num_scheduled_tokens["long"] == CHUNK
        assert sched.num_guard_phase_steps == 0 and sched.num_guard_capped_steps == 2


def test_vllm_engine_passes_the_lock_to_the_scheduler(make_sched: MakeSched) -> None:
    from worker.engine import VllmEngineConfig
    from worker.engine.vllm_engine import VllmEngine

    vllm_cfg = make_sched(Scheduler).vllm_config
    vllm_cfg.scheduler_config.scheduler_cls = None
    engine = VllmEngine(VllmEngineConfig(
        "unused", "m", kv_cache_gib=1, phase_period_s=0.5, phase_offset_s=0.25, phase_cost=COST
    ))
    engine._plug_scheduler(vllm_cfg)
    extra = vllm_cfg.additional_config
    assert extra[vllm_guard.PHASE_PERIOD_KEY] == 0.5
    assert extra[vllm_guard.PHASE_OFFSET_KEY] == 0.25
    assert extra[vllm_guard.PHASE_COST_KEY] == COST
    sched = make_sched(guard_chunk=CHUNK, extra=extra)
    assert sched.phase_lock.grid == PhaseGrid(0.5, 0.25)
    with pytest.raises(ValueError, match="phase_cost"):
        VllmEngineConfig("unused", "m", kv_cache_gib=1, phase_period_s=0.5)
    with pytest.raises(ValueError, match="prefill_per_token_s"):
        make_sched(guard_chunk=CHUNK, extra={**PHASE, vllm_guard.PHASE_COST_KEY: {}})
