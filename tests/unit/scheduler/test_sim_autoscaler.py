"""The simulator's autoscaler: workers asked for hold a GPU at once and serve after their
start delay, scale-down waits out the cooldown, and the rules differ as they should."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.autoscaler import AutoscaledSimulation, AutoscaleSettings
from scheduler.sim.jobs import SimJob
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.tiers import BATCH_TIER, DEFAULT_TIER
from scheduler.types import JobClass

HOUR = 3600.0


def scenario(workers: int, duration_s: float) -> Scenario:
    return Scenario(name="as", duration_s=duration_s, model="m",
                    workers=[WorkerGroup(workers, "h200-llama3-8b", ("m",))], traffic=[],
                    policies=["fairway"], bin_s=300.0, default_ttft_slo_s=1.0)


def batch(n: int, at: float, window_s: float) -> list[SimJob]:
    return [SimJob(f"b{i}", "t", JobClass.BATCH, BATCH_TIER, "m", at + i * 1e-3,
                   at + window_s, 2000, 1024, 1024) for i in range(n)]


def realtime(at: float, n: int = 1) -> list[SimJob]:
    return [SimJob(f"r{at}-{i}", "t", JobClass.REALTIME, DEFAULT_TIER, "m", at + i * 0.01,
                   None, 500, 50, 50, ttft_slo_s=1.0) for i in range(n)]


def run(jobs: list[SimJob], duration_s: float, workers: int = 6,
        **settings: Any) -> AutoscaledSimulation:
    base: dict[str, Any] = {"start_delay_s": 120.0, "gpu_hours_until_s": duration_s}
    base.update(settings)
    sim = AutoscaledSimulation(scenario(workers, duration_s), "fairway",
                               AutoscaleSettings(**base), sorted(jobs, key=lambda j: j.arrival))
    sim.run()
    return sim


def most_held(sim: AutoscaledSimulation) -> int:
    return max(n for _, n, _, _ in sim.timeline)


def test_a_fixed_pool_holds_every_gpu_all_day() -> None:
    sim = run(realtime(10.0), 1800.0, workers=3, rule="fixed")
    assert sim.gpu_s == pytest.approx(3 * 1800.0)


def test_a_backlog_due_soon_asks_for_more_workers_than_the_same_due_late() -> None:
    # ~500 s of one worker's engine time: due in 8 minutes it takes several workers (each
    # serving only 2 minutes after it is asked for), due tomorrow the one there is.
    soon = run(batch(3000, 60.0, 480.0), HOUR, rule="fairway")
    late = run(batch(3000, 60.0, 24 * HOUR), HOUR, rule="fairway")
    assert most_held(soon) > most_held(late) == 1
    assert {why for _, _, _, why in soon.timeline} >= {"batch_deadline"}
    records = soon.metrics.records.values()
    assert all(r.finished is not None and r.finished <= r.job.deadline  # type: ignore[operator]
               for r in records)
    assert late.gpu_s < soon.gpu_s


def test_queue_depth_scales_to_zero_and_the_next_request_waits_for_a_start() -> None:
    jobs = realtime(10.0) + realtime(3000.0)
    sim = run(jobs, 4000.0, rule="queue_depth", min_workers=0, initial_workers=0,
              cooldown_s=300.0, down_step_s=60.0)
    ttft = {r.job.job_id: r.ttft for r in sim.metrics.records.values()}
    assert all(t is not None and t >= 120.0 for t in ttft.values())  # each woke a worker
    assert any(n == 0 for t, n, _, _ in sim.timeline if 1000 < t < 2900)
    assert sim.gpu_s < 0.5 * 4000.0


def test_fairway_wakes_a_worker_for_realtime_waiting_with_none() -> None:
    sim = run(realtime(10.0), 1200.0, rule="fairway", min_workers=0, initial_workers=0)
    assert ("wake" in {why for _, _, _, why in sim.timeline})
    (record,) = sim.metrics.records.values()
    assert record.ttft is not None and 120.0 <= record.ttft < 150.0


def test_fairway_keeps_a_worker_warm_then_scales_to_zero_and_back() -> None:
    jobs = realtime(10.0) + realtime(400.0) + realtime(6000.0)
    sim = run(jobs, 7000.0, rule="fairway", min_workers=0, initial_workers=0,
              cooldown_s=300.0, down_step_s=60.0, fairway={"idle_after_s": 900.0})
    reasons = {why for _, _, _, why in sim.timeline}
    assert {"wake", "warm", "idle"} <= reasons
    held = {t: n for t, n, _, _ in sim.timeline}
    # Warm between the first two (the second is served at once), at zero before the third.
    assert all(n == 1 for t, n in held.items() if 200 < t < 1000)
    assert any(n == 0 for t, n in held.items() if 2500 < t < 6000)
    ttft = {r.job.job_id: r.ttft for r in sim.metrics.records.values()}
    assert ttft["r400.0-0"] is not None and ttft["r400.0-0"] < 1.0
    assert ttft["r6000.0-0"] is not None and ttft["r6000.0-0"] >= 120.0
    assert sim.cold_arrivals == ["r10.0-0", "r6000.0-0"]
    assert sim.gpu_s < 0.5 * 7000.0


def test_fairway_at_zero_leaves_a_far_backlog_until_its_deadline_calls() -> None:
    far = run(batch(50, 60.0, 24 * HOUR), 1800.0, rule="fairway", min_workers=0,
              initial_workers=0)
    assert most_held(far) == 0 and far.gpu_s == 0.0
    near = run(batch(50, 60.0, 1200.0), 1800.0, rule="fairway", min_workers=0,
               initial_workers=0)
    assert most_held(near) >= 1
    assert all(r.finished is not None and r.finished <= r.job.deadline  # type: ignore[operator]
               for r in near.metrics.records.values())


def test_a_worker_s_start_is_its_profile_s_unless_set() -> None:
    from scheduler.cost_profiles import profile

    sim = run(realtime(10.0), 1200.0, rule="fairway", min_workers=0, initial_workers=0,
              start_delay_s=None)
    assert sim.start_delay_s == profile("h200-llama3-8b").start_s
    (record,) = sim.metrics.records.values()
    assert record.ttft is not None and sim.start_delay_s <= record.ttft < sim.start_delay_s + 30
    slow = run(realtime(10.0), 1200.0, rule="fairway", min_workers=0, initial_workers=0,
               start_delay_s=300.0)
    (record,) = slow.metrics.records.values()
    assert record.ttft is not None and record.ttft >= 300.0


def test_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError):
        AutoscaleSettings(rule="random")
