"""Exact-order tests of the Fairway policy, on plain objects."""

from __future__ import annotations

from dataclasses import replace

from sched_helpers import assigns, batch, order, rt, worker

from scheduler.interface import PolicyKind
from scheduler.policies import FairwayConfig, FairwayPolicy, make_policy
from scheduler.types import Reject, WorkerView

NO_HEADROOM = FairwayConfig(headroom_enabled=False)


def one_slot_policy(config: FairwayConfig = NO_HEADROOM) -> FairwayPolicy:
    policy = FairwayPolicy(config)
    policy.on_worker_heartbeat(worker("w1", slots=1))
    return policy


def drain(policy: FairwayPolicy, now: float = 0.0, limit: int = 100) -> list[str]:
    """Run one job at a time to completion (usage = estimate) and return the order."""
    served: list[str] = []
    for _ in range(limit):
        decisions = assigns(policy.schedule(now))
        if not decisions:
            break
        for job_id, worker_id in decisions:
            served.append(job_id)
            policy.on_job_finished(job_id, worker_id, 0, 0)
    return served


def test_factory_gives_the_full_policy() -> None:
    assert isinstance(make_policy(PolicyKind.FAIRWAY), FairwayPolicy)
    assert isinstance(make_policy("fairway", NO_HEADROOM), FairwayPolicy)


def test_realtime_goes_before_earlier_batch() -> None:
    policy = one_slot_policy()
    policy.on_job_arrived(batch("b1", at=0.0))
    policy.on_job_arrived(rt("r1", at=1.0))
    assert order(policy, 1.0) == ["r1"]
    assert policy.num_queued() == 1


def test_equal_weights_alternate_between_tenants() -> None:
    policy = one_slot_policy()
    for i in range(3):
        policy.on_job_arrived(batch(f"a{i}", "a", at=i))
        policy.on_job_arrived(batch(f"b{i}", "b", at=10 + i))
    assert drain(policy) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_weights_two_to_one() -> None:
    policy = one_slot_policy()
    for i in range(4):
        policy.on_job_arrived(batch(f"a{i}", "a", weight=2.0, at=i))
        policy.on_job_arrived(batch(f"b{i}", "b", weight=1.0, at=i))
    served = drain(policy)
    assert served[:6] == ["a0", "b0", "a1", "a2", "b1", "a3"]


def test_earliest_deadline_first_within_a_tenant() -> None:
    policy = one_slot_policy()
    for job_id, deadline in [("late", 3e4), ("soon", 1e4), ("mid", 2e4), ("none", None)]:
        policy.on_job_arrived(batch(job_id, deadline=deadline))
    assert drain(policy) == ["soon", "mid", "late", "none"]


def test_returning_tenant_is_lifted_and_banks_no_credit() -> None:
    policy = one_slot_policy()
    for i in range(5):
        policy.on_job_arrived(batch(f"a{i}", "a"))
    assert drain(policy, limit=3) == ["a0", "a1", "a2"]
    for i in range(3):
        policy.on_job_arrived(batch(f"b{i}", "b"))
    # Without the lift b would take three turns in a row to catch up.
    assert drain(policy) == ["a3", "b0", "a4", "b1", "b2"]


def test_batch_escalates_over_a_cheaper_tenant_before_its_deadline() -> None:
    policy = one_slot_policy()
    for i in range(6):  # make tenant b expensive
        policy.on_job_arrived(batch(f"old{i}", "b"))
    drain(policy)
    policy.on_job_arrived(batch("cheap", "a", at=100.0))
    policy.on_job_arrived(batch("due", "b", at=100.0, deadline=200.0))
    assert policy.level_of("due") == 1
    policy.schedule(150.0)  # the slot is free: "cheap" (smaller counter) wins
    assert policy.worker_of("cheap") == "w1"
    policy.on_job_finished("cheap", "w1", 0, 0)
    policy.on_job_arrived(batch("cheap2", "a", at=150.0))
    assert order(policy, 195.0) == ["due"]  # escalated: ahead of any batch, before 200


def test_realtime_preempts_the_batch_job_that_loses_least() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w1", slots=2))
    policy.on_job_arrived(batch("big", prompt=1000))
    policy.on_job_arrived(batch("small", prompt=10))
    assert sorted(order(policy, 0.0)) == ["big", "small"]
    policy.on_job_arrived(rt("r1", at=1.0))
    decisions = policy.schedule(1.0)
    assert [type(d).__name__ for d in decisions] == ["Preempt", "Assign"]
    assert decisions[0].job_id == "small"
    assert assigns(decisions) == [("r1", "w1")]


def test_realtime_never_preempts_realtime() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w1", slots=1))
    policy.on_job_arrived(rt("r1", slo=100.0))
    assert order(policy) == ["r1"]
    policy.on_job_arrived(rt("r2", at=0.1, slo=100.0))
    assert policy.schedule(0.1) == []
    assert policy.num_queued() == 1


def test_unreachable_slo_is_rejected_and_flex_goes_first() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w1", slots=1))
    policy.on_job_arrived(rt("r1", slo=100.0, out=5000))
    policy.on_job_arrived(batch("flex1", priority=2, deadline=600.0))
    assert order(policy) == ["r1"]
    policy.on_job_arrived(rt("r2", at=0.5, slo=0.2))
    decisions = policy.schedule(0.5)
    rejects = [d for d in decisions if isinstance(d, Reject)]
    assert [d.job_id for d in rejects] == ["flex1", "r2"]
    assert rejects[1].retry_after_s >= 1.0
    policy.on_job_arrived(batch("flex2", priority=2, at=1.0, deadline=600.0))
    assert [d.job_id for d in policy.schedule(1.0) if isinstance(d, Reject)] == ["flex2"]


def test_requeued_realtime_job_is_never_refused_for_slo() -> None:
    # Its worker was lost mid-stream: the client already holds tokens, and its wait since
    # arrival is long past the target. It was admitted once; it runs again, it is not refused.
    policy = one_slot_policy()
    policy.on_job_arrived(rt("r1", slo=100.0, out=5000))
    assert order(policy) == ["r1"]
    policy.on_job_arrived(replace(rt("back", slo=0.2), requeued=True, generated_tokens=40))
    policy.on_job_arrived(rt("fresh", at=5.0, slo=0.2))
    rejects = [d.job_id for d in policy.schedule(5.0) if isinstance(d, Reject)]
    assert rejects == ["fresh"]
    assert policy.num_queued() == 1


def test_job_for_unserved_model_waits_and_runs_once_a_worker_serves_it() -> None:
    policy = one_slot_policy()
    policy.on_job_arrived(rt("r1", model="other"))
    policy.on_job_arrived(batch("b1", model="other"))
    assert policy.schedule(0.0) == []  # a worker may be starting: wait, don't refuse
    assert policy.num_queued() == 2
    policy.on_worker_heartbeat(WorkerView(
        worker_id="w-other", models=("other",), max_slots=1, running=0,
        kv_capacity_tokens=100_000, kv_used_tokens=0, last_seen=0.0))
    assert [(type(d).__name__, d.job_id) for d in policy.schedule(1.0)] == [("Assign", "r1")]


def test_cancelled_job_is_never_assigned() -> None:
    policy = one_slot_policy()
    policy.on_job_arrived(batch("b1"))
    policy.on_job_arrived(batch("b2"))
    policy.on_job_cancelled("b1")
    assert order(policy) == ["b2"]
    assert policy.num_queued() == 0


def test_lost_worker_jobs_come_back_and_are_placed_again() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w1", slots=1))
    policy.on_job_arrived(batch("b1"))
    assert order(policy) == ["b1"]
    policy.on_worker_lost("w1")
    policy.on_worker_heartbeat(worker("w2", slots=1))
    policy.on_job_arrived(batch("b1"))
    assert assigns(policy.schedule(1.0)) == [("b1", "w2")]
