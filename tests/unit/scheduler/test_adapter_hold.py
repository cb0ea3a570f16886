"""Holding an adapter job in the policy's queue while every worker's adapter slots are taken
by other adapters (scheduler/policies/adapter_hold.py): held, released when a slot frees or
its deadline nears, in fair-share / EDF order, never past the per-pass bound."""

from __future__ import annotations

from dataclasses import replace

from sched_helpers import COST, assigns, batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.adapter_hold import hold_until
from scheduler.types import JobView, WorkerView

HOLD = FairwayConfig(headroom_enabled=False, adapter_load_s=0.3, adapter_hold=True)
NO_HOLD = replace(HOLD, adapter_hold=False)


def lora_worker(worker_id: str, *, adapters: tuple[str, ...] = ()) -> WorkerView:
    """One adapter slot per step, four kept loaded."""
    return replace(worker(worker_id, slots=8), adapters=adapters, max_loras=1, max_cpu_loras=4)


def on(job: JobView, adapter: str) -> JobView:
    job.adapter = adapter
    return job


def crowded(config: FairwayConfig) -> FairwayPolicy:
    """Two workers, each slot taken: x runs on w1, y on w2."""
    policy = FairwayPolicy(config)
    policy.on_worker_heartbeat(lora_worker("w1"))
    policy.on_worker_heartbeat(lora_worker("w2"))
    policy.on_job_arrived(on(batch("x1"), "x"))
    policy.on_job_arrived(on(batch("y1"), "y"))
    assert sorted(assigns(policy.schedule(0.0))) == [("x1", "w1"), ("y1", "w2")]
    return policy


def test_a_job_every_worker_is_crowded_out_for_waits_until_a_slot_frees() -> None:
    policy = crowded(HOLD)
    policy.on_job_arrived(on(batch("z1"), "z"))
    assert assigns(policy.schedule(0.1)) == []
    assert policy.level_of("z1") == 1  # queued, not dropped
    policy.on_job_finished("y1", "w2", 100, 50)  # y's last job: w2's slot is free
    assert assigns(policy.schedule(0.2)) == [("z1", "w2")]


def test_without_holding_it_is_sent_to_a_crowded_worker_at_once() -> None:
    policy = crowded(NO_HOLD)
    policy.on_job_arrived(on(batch("z1"), "z"))
    assert len(assigns(policy.schedule(0.1))) == 1


def test_a_job_whose_adapter_runs_somewhere_is_not_held() -> None:
    policy = crowded(HOLD)
    policy.on_job_arrived(on(batch("x2"), "x"))  # runs on w1: batches there at once
    assert assigns(policy.schedule(0.1)) == [("x2", "w1")]


def test_a_warm_adapter_without_a_slot_is_held_too() -> None:
    policy = crowded(HOLD)
    policy.on_worker_heartbeat(lora_worker("w2", adapters=("y", "v")))  # v loaded on w2
    policy.on_job_arrived(on(batch("v1"), "v"))
    assert assigns(policy.schedule(0.2)) == []  # it would wait for y's slot all the same
    policy.on_job_finished("y1", "w2", 100, 50)
    assert assigns(policy.schedule(0.3)) == [("v1", "w2")]


def test_a_free_slot_on_any_worker_takes_it() -> None:
    policy = crowded(HOLD)
    policy.on_worker_heartbeat(lora_worker("w3"))
    policy.on_job_arrived(on(batch("z1"), "z"))
    assert assigns(policy.schedule(0.1)) == [("z1", "w3")]


def test_realtime_is_held_only_until_its_deadline_needs_it_placed() -> None:
    policy = crowded(HOLD)
    job = on(rt("r1", at=0.0, slo=2.0), "z")
    policy.on_job_arrived(job)
    latest = hold_until(job, HOLD, COST)
    assert 0.5 < latest < 2.0 - HOLD.adapter_load_s
    assert assigns(policy.schedule(0.1)) == []
    assert assigns(policy.schedule(latest - 0.01)) == []
    assert len(assigns(policy.schedule(latest))) == 1  # placed as without holding


def test_batch_is_held_until_it_escalates() -> None:
    policy = crowded(HOLD)
    policy.on_job_arrived(on(batch("z1", deadline=3600.0), "z"))
    assert assigns(policy.schedule(1.0)) == []
    assert policy.level_of("z1") == 1
    # Its latest start (deadline - service - escalation margin) has come: placed at once.
    placed = assigns(policy.schedule(3600.0 - HOLD.escalation_margin_s))
    assert [job_id for job_id, _ in placed] == ["z1"]


def test_held_jobs_keep_their_edf_order_for_the_slot_that_frees() -> None:
    policy = crowded(HOLD)
    policy.on_job_arrived(on(batch("late", deadline=90_000.0), "u"))
    policy.on_job_arrived(on(batch("soon", deadline=50_000.0), "z"))
    assert assigns(policy.schedule(0.1)) == []
    policy.on_job_finished("y1", "w2", 100, 50)
    assert assigns(policy.schedule(0.2)) == [("soon", "w2")]
    assert policy.level_of("late") == 1  # w2's slot is z's now: still held


def test_held_jobs_keep_their_tenants_fair_share_turn() -> None:
    policy = crowded(HOLD)
    # Tenant b is served a held-for job's worth before a's job arrives; a keeps its turn.
    policy.on_job_arrived(on(batch("b1", "b", deadline=50_000.0), "z"))
    policy.on_job_arrived(on(batch("a1", "a", deadline=90_000.0), "u"))
    policy.on_job_arrived(on(batch("b2", "b"), "x"))  # x runs on w1: placed, b charged
    assert assigns(policy.schedule(0.1)) == [("b2", "w1")]
    policy.on_job_finished("y1", "w2", 100, 50)
    assert assigns(policy.schedule(0.2)) == [("a1", "w2")]  # a's counter is the smaller


def test_past_the_per_pass_bound_jobs_are_placed_as_without_holding() -> None:
    policy = crowded(replace(HOLD, adapter_hold_scan=1))
    policy.on_job_arrived(on(batch("z1", deadline=50_000.0), "z"))
    policy.on_job_arrived(on(batch("u1", deadline=90_000.0), "u"))
    assert [job_id for job_id, _ in assigns(policy.schedule(0.1))] == ["u1"]
    assert policy.level_of("z1") == 1


def test_holding_needs_adapter_aware_placement() -> None:
    policy = crowded(replace(HOLD, adapter_aware=False))
    policy.on_job_arrived(on(batch("z1"), "z"))
    assert len(assigns(policy.schedule(0.1))) == 1
