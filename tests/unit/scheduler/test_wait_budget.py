"""A queue-mode plan's longest queue wait is kept: a realtime job still queued when its budget
runs out is refused then (429, queue_wait_expired), not left waiting on."""

from __future__ import annotations

from dataclasses import replace

from sched_helpers import assigns, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.wait_budget import REASON
from scheduler.types import Reject

BUDGET = 1000.0  # past the admission's predicted wait behind the hog: admitted, then expired


def queued_rt(job_id: str, at: float = 0.0, budget: float | None = BUDGET):
    # A huge TTFT target: only the wait budget is under test.
    return replace(rt(job_id, at=at, slo=1e6, out=10_000), max_wait_s=budget)


def full_pool() -> FairwayPolicy:
    """One worker of one slot, held by a long realtime job."""
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    policy.on_worker_heartbeat(worker("w", slots=1))
    policy.on_job_arrived(rt("hog", slo=1e6, out=50_000))
    assert assigns(policy.schedule(0.0)) == [("hog", "w")]
    return policy


def refusals(decisions) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(d.job_id, d.reason) for d in decisions if isinstance(d, Reject)]


def test_a_job_still_queued_past_its_budget_is_refused_then() -> None:
    policy = full_pool()
    policy.on_job_arrived(queued_rt("late", at=1.0))
    assert refusals(policy.schedule(1.0)) == []  # admitted: its predicted wait fits
    assert refusals(policy.schedule(1.0 + BUDGET - 0.5)) == []
    assert policy.level_of("late") == 0  # still waiting
    assert refusals(policy.schedule(1.0 + BUDGET + 0.1)) == [("late", REASON)]
    assert policy.level_of("late") is None


def test_a_job_placed_within_its_budget_is_not_refused() -> None:
    policy = full_pool()
    policy.on_job_arrived(queued_rt("lucky", at=1.0))
    policy.schedule(2.0)
    policy.on_job_finished("hog", "w", 100, 100)
    assert assigns(policy.schedule(3.0)) == [("lucky", "w")]
    assert refusals(policy.schedule(1.0 + BUDGET + 5)) == []


def test_shed_mode_and_requeued_jobs_have_no_budget_here() -> None:
    policy = full_pool()
    policy.on_job_arrived(queued_rt("shed", at=1.0, budget=None))
    policy.on_job_arrived(replace(queued_rt("back", at=1.0), requeued=True))
    assert refusals(policy.schedule(1.0)) == []
    assert refusals(policy.schedule(1.0 + 10 * BUDGET)) == []


def test_with_no_worker_the_budget_counts_from_the_first_one() -> None:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    policy.on_job_arrived(queued_rt("cold", at=0.0))
    # No worker for its model (the waiting room's to bound): not refused at the budget...
    assert refusals(policy.schedule(BUDGET + 1)) == []
    policy.on_worker_heartbeat(worker("w", slots=1))
    policy.on_job_arrived(rt("hog", slo=1e5, out=50_000, at=0.0))  # due first: placed
    assert assigns(policy.schedule(BUDGET + 2)) == [("hog", "w")]
    # ... but a budget later than its expiry was first met.
    assert refusals(policy.schedule(2 * BUDGET)) == []
    assert refusals(policy.schedule(2 * BUDGET + 1.5)) == [("cold", REASON)]
