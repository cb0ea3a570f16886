"""The mean realtime job the slot-wait term uses (scheduler.policies.admission.ServiceEstimate):
it leaves its prior after the first finished job, and answers are bounded by what arrivals
ask (max_tokens), so a cold pool's burst of short requests is not refused for a long prior."""

from __future__ import annotations

import pytest

from scheduler.outlook import door_refusal
from scheduler.policies import FairwayConfig, make_policy
from scheduler.policies.admission import SIZE_WEIGHT, ServiceEstimate
from scheduler.policies.fairway import FairwayPolicy
from scheduler.types import JobClass, JobView, WorkerView

MODEL = "m"


def _cold_pool_after_burst(max_tokens: int, burst: int) -> FairwayPolicy:
    policy = make_policy("fairway", FairwayConfig())
    assert isinstance(policy, FairwayPolicy)
    for wid in ("w1", "w2"):
        policy.on_worker_heartbeat(WorkerView(
            worker_id=wid, models=(MODEL,), max_slots=4, running=0,
            kv_capacity_tokens=100_000, kv_used_tokens=0, last_seen=0.0, assigned={}))
    for i in range(burst):
        policy.on_job_arrived(JobView(
            job_id=f"j{i}", tenant_id="t", job_class=JobClass.REALTIME, priority=1,
            model=MODEL, arrival=0.0, deadline=None, prompt_tokens=20, max_tokens=max_tokens))
    return policy


def test_a_burst_of_short_requests_is_judged_by_what_it_asks() -> None:
    short, long = (_cold_pool_after_burst(max_tokens, burst=24) for max_tokens in (8, 512))
    (short_view,), (long_view,) = short.outlook(0.0), long.outlook(0.0)
    assert short_view.job_service_s < long_view.job_service_s / 4
    # The same queue of 24 on 8 slots: 8-token answers clear it well within a 1 s target;
    # the prior's 128-token answers (still below the 512 asked) would not.
    assert door_refusal(short_view, prompt_tokens=20, target_s=1.0) is None
    assert door_refusal(long_view, prompt_tokens=20, target_s=1.0) is not None


def test_the_first_finished_jobs_replace_the_prior() -> None:
    sizes = ServiceEstimate()
    sizes.observe(100, 10)
    assert (sizes.prompt_tokens, sizes.output_tokens) == (100, 10)
    sizes.observe(300, 30)
    assert (sizes.prompt_tokens, sizes.output_tokens) == pytest.approx((200, 20))
    for _ in range(200):
        sizes.observe(300, 30)
    before = sizes.output_tokens
    sizes.observe(300, 1030)  # past its first jobs: one answer moves it by the floor weight
    assert sizes.output_tokens - before == pytest.approx(SIZE_WEIGHT * (1030 - before))


def test_the_expected_answer_is_the_smaller_of_what_was_seen_and_what_is_asked() -> None:
    sizes = ServiceEstimate()
    sizes.observe(50, 16)
    sizes.note_asked(4096)  # a large ask does not make answers longer than they have been
    assert sizes.expected_output == 16
    for _ in range(200):
        sizes.note_asked(4)  # arrivals now ask for 4 at most: none can be longer
    assert sizes.expected_output == pytest.approx(4, abs=0.1)
