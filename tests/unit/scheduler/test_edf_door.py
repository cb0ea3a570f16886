"""The door's prediction under EDF across tenants: of another tenant's queue, only its jobs
due before the new request count ahead (scheduler.outlook.fair_ahead, edf_ahead), from the
deadlines the policy's outlook publishes (RealtimeOutlook.deadlines)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sched_helpers import rt, worker

from scheduler.outlook import (
    RealtimeOutlook,
    door_verdict,
    edf_ahead,
    fair_ahead,
    predict_new_ttft,
)
from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import JobView
from service.store.heartbeats import decode_outlook, encode_outlook


def test_a_tenants_jobs_due_before_the_new_one_count_ahead() -> None:
    assert edf_ahead(10, 1.0, 3.0, due_s=5.0) == 10  # all due first
    assert edf_ahead(10, 1.0, 3.0, due_s=0.5) == 0  # none
    assert edf_ahead(10, 1.0, 3.0, due_s=2.0) == pytest.approx(5.0)  # half, spread evenly
    assert edf_ahead(4, 2.0, 2.0, due_s=2.0) == 4  # one deadline, due with it


def test_edf_only_ever_takes_from_the_fair_share_ahead() -> None:
    backlog = (("loose", 40, 1.0), ("tight", 2, 1.0))
    spans = (("loose", 0.5, 3.0), ("tight", 0.1, 0.4))
    fair = fair_ahead(backlog, tenant="tight", weight=1.0)
    assert fair == 2 + 3  # its own 2, and 3 rounds of loose's
    # A tight request due in 0.6 s: of loose's 40 (due 0.5-3 s), ~1.6 come first.
    edf = fair_ahead(backlog, tenant="tight", weight=1.0, due_s=0.6, deadlines=spans)
    assert edf == pytest.approx(2 + 40 * 0.1 / 2.5)
    # A loose request due in 3 s: tight's are all due first, as many as fair share gives.
    assert fair_ahead(backlog, tenant="loose", weight=1.0, due_s=3.0, deadlines=spans) == (
        fair_ahead(backlog, tenant="loose", weight=1.0))
    # Without its own deadline, or the tenants', fair share alone.
    assert fair_ahead(backlog, tenant="tight", weight=1.0, deadlines=spans) == fair
    assert fair_ahead(backlog, tenant="tight", weight=1.0, due_s=0.6) == fair


def queued(job: JobView) -> JobView:
    job.max_wait_s = 1000.0  # a queue-mode plan: it waits rather than be refused
    return job


def policy_with_backlog() -> FairwayPolicy:
    """One busy slot; a loose tenant's 12 requests queued (3 s target), one tight one (0.5 s)."""
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    policy.on_worker_heartbeat(worker("w", slots=1, kv=10**9))
    policy.on_job_arrived(rt("busy", "other", slo=100.0))
    policy.schedule(0.0)
    for i in range(12):
        policy.on_job_arrived(queued(rt(f"loose-{i}", "loose", at=0.1 * i, slo=3.0)))
    policy.on_job_arrived(queued(rt("tight-0", "tight", at=1.1, slo=0.5)))
    assert not policy.schedule(1.2)  # all queued behind the busy slot
    return policy


def test_the_policys_outlook_says_when_each_tenants_queue_is_due() -> None:
    (outlook,) = policy_with_backlog().outlook(1.2)
    spans = {t: (first, last) for t, first, last in outlook.deadlines}
    assert spans["loose"] == pytest.approx((3.0 - 1.2, 4.1 - 1.2))  # seconds after `at`
    assert spans["tight"] == pytest.approx((1.6 - 1.2, 1.6 - 1.2))
    back = decode_outlook(encode_outlook(outlook))  # as the API reads it from Redis
    assert back is not None and back.deadlines == outlook.deadlines
    old = decode_outlook(encode_outlook(replace(outlook, deadlines=())))
    assert old is not None and old.deadlines == ()


def ttft(o: RealtimeOutlook, due_in_s: float | None = None) -> float:
    return predict_new_ttft(o, prompt_tokens=100, tenant="new", due_in_s=due_in_s)


def refused(o: RealtimeOutlook, target_s: float, due_in_s: float | None = None) -> bool:
    verdict = door_verdict(o, prompt_tokens=100, target_s=target_s, tenant="new",
                           due_in_s=due_in_s)
    return verdict.retry_after is not None


def test_a_tight_request_is_not_judged_by_a_looser_tenants_queue() -> None:
    (outlook,) = policy_with_backlog().outlook(1.2)
    fair, tight, loose = ttft(outlook), ttft(outlook, 0.5), ttft(outlook, 30.0)
    assert tight < fair and loose == pytest.approx(fair)
    # So the door admits the tight request at a target the fair-share prediction would miss.
    target = (tight + fair) / 2 / 0.7
    assert refused(outlook, target) and not refused(outlook, target, due_in_s=0.5)


def test_an_outlook_from_before_deadlines_predicts_by_fair_share() -> None:
    (outlook,) = policy_with_backlog().outlook(1.2)
    bare = replace(outlook, deadlines=())
    assert ttft(bare, 0.5) == ttft(bare)


def test_a_fair_queue_knows_when_a_tenants_jobs_are_due() -> None:
    from scheduler.policies.fairqueue import FairQueue
    from scheduler.policies.vtc import VirtualCounters

    fq = FairQueue(VirtualCounters(1.0, 1.0))
    assert fq.deadline_span("a") is None
    for i, due in enumerate((5.0, 2.0, 9.0)):
        fq.add(rt(f"a-{i}", "a"), (due, float(i), f"a-{i}"))
    assert fq.deadline_span("a") == (2.0, 9.0)
    fq.remove("a-1")  # the earliest goes: the next is the head
    assert fq.deadline_span("a") == (5.0, 9.0)
    fq.remove("a-0")
    fq.remove("a-2")
    assert fq.deadline_span("a") is None
