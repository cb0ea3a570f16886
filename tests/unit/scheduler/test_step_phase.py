"""The step phase lock (scheduler/step_phase.py): grid arithmetic, the simulated engine's steps
landing on their grid, and the pool's steps staggered under a flood."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.cost_model import DEFAULT_COST
from scheduler.cost_profiles import profile
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq
from scheduler.step_phase import PhaseGrid, chunk_for_grid, spread
from scheduler.types import JobClass

SCENARIOS = Path(__file__).resolve().parents[3] / "bench" / "scenarios"


def test_spread_is_bit_reversal() -> None:
    assert [spread(i) for i in range(8)] == [0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
    with pytest.raises(ValueError):
        spread(-1)


@given(st.integers(min_value=1, max_value=300))
def test_any_first_n_slots_leave_no_gap_over_two_nths(n: int) -> None:
    points = sorted(spread(i) for i in range(n))
    gaps = [b - a for a, b in pairwise(points)] + [1 + points[0] - points[-1]]
    assert len(set(points)) == n
    assert max(gaps) <= 2 / n + 1e-12


@given(
    st.floats(min_value=0.001, max_value=1.0),
    st.integers(min_value=0, max_value=64),
    st.floats(min_value=0.0, max_value=1e5),
)
def test_next_point_is_the_first_grid_point_at_or_after(period: float, slot: int, t: float) -> None:
    grid = PhaseGrid.for_slot(period, slot)
    at = grid.next_point(t)
    assert t - 1e-9 * max(1.0, t) <= at < t + period + 1e-6
    m = (at - grid.offset_s) / period
    assert abs(m - round(m)) < 1e-6


def test_chunk_fills_the_step_to_the_next_grid_point_within_the_cap() -> None:
    grid = PhaseGrid(0.030, 0.010)  # points at ..., 0.010, 0.040, 0.070
    # Starts at 0.012, decodes take 0.008: 0.020 s left to 0.040 at 1 ms per token.
    assert chunk_for_grid(grid, 0.012, 0.008, 0.001, 100) == 20
    assert chunk_for_grid(grid, 0.012, 0.008, 0.001, 15) == 15  # capped: ends early
    assert chunk_for_grid(grid, 0.012, 0.028, 0.001, 100) == 0  # decodes end on the point
    with pytest.raises(ValueError):
        PhaseGrid(0.0)


def _flooded_engine(phase: PhaseGrid | None) -> EngineModel:
    engine = EngineModel(DEFAULT_COST, realtime_guard=True, phase=phase)
    for i in range(40):
        engine.add(Seq(f"b{i}", "t", False, 0.0, 3000, 50, 3100), 0.0)
    return engine


def test_guarded_steps_end_on_the_engine_grid() -> None:
    grid = PhaseGrid.for_slot(DEFAULT_COST.phase_period_s(), 3)
    engine = _flooded_engine(grid)
    now, ends = 0.0, []
    for _ in range(60):
        end = engine.start(now)
        assert end is not None
        ends.append(end)
        engine.finish_step()
        now = end
    on_grid = [e for e in ends if abs(grid.next_point(e - 1e-6) - e) < 1e-4]
    assert len(on_grid) >= 0.9 * len(ends)
    unlocked = _flooded_engine(None)
    end = unlocked.start(0.0)
    assert end is not None and abs(grid.next_point(end - 1e-6) - end) > 1e-4


class _ResidualProbe(Simulation):
    """Records, at each realtime arrival, the soonest any worker's step in flight ends."""

    def __init__(self, scenario: Scenario, variant: str) -> None:
        super().__init__(scenario, variant)
        self.waits: list[float] = []

    def _arrive(self) -> None:
        job = self.jobs[self._next_arrival]
        if job.job_class is JobClass.REALTIME:
            ends = [e.step_end - self.now if e.step_end is not None else 0.0
                    for e in self.engines.values()]
            self.waits.append(min(ends))
        super()._arrive()


def _p99(xs: list[float]) -> float:
    return sorted(xs)[int(0.99 * len(xs))]


def test_the_lock_staggers_a_flooded_pool_so_some_step_always_ends_soon() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_rt_under_batch_h200.json")
    scenario.duration_s = 60
    locked = _ResidualProbe(scenario, "fairway")
    locked_result = locked.run()
    scenario.fairway_engine = {"phase_period_s": 0.0}
    drifting = _ResidualProbe(scenario, "fairway")
    drifting_result = drifting.run()
    period = profile("h200-llama3-8b").phase_period_s()
    # Unlocked, the 4 workers' steps drift together (~19 ms at p99); locked, a quarter
    # period apart, the soonest end is within ~period / 4.
    assert _p99(locked.waits) < 0.8 * _p99(drifting.waits)
    assert _p99(locked.waits) < period / 2
    batch = JobClass.BATCH
    assert locked_result.metrics.tokens_out[batch] >= 0.97 * drifting_result.metrics.tokens_out[
        batch
    ]


def test_cpu_profile_runs_unlocked() -> None:
    assert profile("cpu-smollm2-135m").phase_period_s() == 0.0
    assert 0.03 < profile("h200-llama3-8b").phase_period_s() < 0.04
