"""The slot-wait term of the realtime prediction (scheduler.outlook.queue_wait_s): slots
free when the jobs in them end, so a pool that one burst filled frees none until that cohort
ends, and jobs hold their slots as long as they are seen to, not as the profile says."""

from __future__ import annotations

import pytest

from scheduler.outlook import RealtimeOutlook, listed_free_s, queue_wait_s
from scheduler.policies import FairwayPolicy
from scheduler.policies.admission import ServiceEstimate
from service.store.heartbeats import decode_outlook, encode_outlook
from tests.unit.scheduler.sched_helpers import assigns, rt, worker


def outlook(frees: tuple[float, ...]) -> RealtimeOutlook:
    """Four slots held by realtime, one job ahead: the second slot to free is the new job's."""
    return RealtimeOutlook(
        model="m", at=0.0, workers=1, slots_total=4, rt_load=5, rt_queued_prefill=0,
        mean_prompt_tokens=0, job_service_s=4.0, step_s=0.0, prefill_per_token_s=0.0,
        prefill_step_s=0.0, token_budget=512, rt_queued=1, rt_frees_s=frees)


def test_a_cohort_that_started_together_frees_its_slots_together() -> None:
    # By the even rate, a slot every second: the second in 2 s.
    assert queue_wait_s(outlook(()), ahead=1, extra_jobs=0) == pytest.approx(2.0)
    # All four started a moment ago: none frees for 3.9 s.
    together = outlook((3.9, 3.9, 3.9, 3.9))
    assert queue_wait_s(together, ahead=1, extra_jobs=0) == pytest.approx(3.9)
    # Half a second after the outlook, 3.4 s are left.
    assert queue_wait_s(together, ahead=1, extra_jobs=0, elapsed_s=0.5) == pytest.approx(3.4)
    # Jobs past their expected end (listed as 0) may be long ones: the rate still counts.
    assert queue_wait_s(outlook((0.0, 0.0, 0.0, 0.0)), ahead=1,
                        extra_jobs=0) == pytest.approx(2.0)


def test_only_the_listed_ends_are_read() -> None:
    o = outlook((1.0, 3.0))
    assert listed_free_s(o, 0.0) == 0.0  # a free slot: nothing to wait for
    assert listed_free_s(o, 1.5) == pytest.approx(3.0)  # the second end
    assert listed_free_s(o, 3.0) == 0.0  # more than listed: the rate judges alone


def test_the_ends_survive_redis_and_the_policy_lists_its_cohort() -> None:
    policy = FairwayPolicy()
    policy.on_worker_heartbeat(worker("w1", slots=4))
    for i in range(4):
        policy.on_job_arrived(rt(f"a{i}", "a", prompt=100, out=50))
    assert len(assigns(policy.schedule(0.0))) == 4
    half = policy.outlook(0.0)[0].job_service_s / 2
    (o,) = policy.outlook(half)
    assert len(o.rt_frees_s) == 4 and len(set(o.rt_frees_s)) == 1  # one cohort
    assert o.rt_frees_s[0] == pytest.approx(o.job_service_s - half)
    back = decode_outlook(encode_outlook(o))
    assert back is not None and back.rt_frees_s == o.rt_frees_s


def test_the_slot_time_is_learned_from_jobs_that_held_slots_longer() -> None:
    size = ServiceEstimate()
    size.observe_time(held_s=3.0, profile_s=2.0)  # the first weighs in fully
    assert size.pace == pytest.approx(1.5)
    for _ in range(200):
        size.observe_time(held_s=6.0, profile_s=2.0)
    assert size.pace == pytest.approx(3.0, rel=0.01)
    size.observe_time(held_s=1e6, profile_s=1.0)  # a stuck job moves it at most this far
    assert size.pace < 3.0 + 0.05 * 8.0 + 1e-9


def test_the_policy_learns_how_long_realtime_held_its_slots() -> None:
    policy = FairwayPolicy()
    policy.on_worker_heartbeat(worker("w1", slots=4))
    policy.on_job_arrived(rt("a0", "a", prompt=100, out=50))
    assert assigns(policy.schedule(0.0)) == [("a0", "w1")]
    (before,) = policy.outlook(0.0)
    held = 4 * before.job_service_s
    policy.schedule(held)  # the policy's clock when the job ends
    policy.on_job_finished("a0", "w1", 100, 50)
    assert policy.admission.realtime_size.pace > 2.0
    (after,) = policy.outlook(held)
    assert after.job_service_s > 2 * before.job_service_s
