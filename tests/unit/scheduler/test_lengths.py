"""Length-aware ordering: the output-length predictor, and shortest predicted first among a
tenant's batch jobs with aging (FairwayConfig.length_aware)."""

from __future__ import annotations

import pytest
from sched_helpers import assigns, batch, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.lengths import OutputLengthPredictor


def test_the_predictor_learns_per_tenant_and_prompt_bucket_within_max_tokens() -> None:
    p = OutputLengthPredictor(min_samples=2)
    assert p.predict("a", 100, 500) == 500  # nothing known: the client's bound
    for _ in range(2):
        p.observe("a", 100, 20)  # bucket 6 (64-127)
        p.observe("a", 3000, 400)  # bucket 11
    assert p.predict("a", 90, 500) == pytest.approx(20)
    assert p.predict("a", 2500, 500) == pytest.approx(400)
    assert p.predict("a", 2500, 300) == 300  # never above max_tokens
    # an unseen bucket falls back to the tenant's mean over all buckets
    assert p.predict("a", 600, 500) == pytest.approx(210)
    assert p.predict("b", 100, 500) == 500


def policy(length_aware: bool) -> FairwayPolicy:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False, length_aware=length_aware,
                                         length_aging_s_per_unit=0.01))
    policy.on_worker_heartbeat(worker("w1", slots=1))
    return policy


def serve_one(policy: FairwayPolicy, now: float, out: dict[str, int]) -> str:
    ((job_id, worker_id),) = assigns(policy.schedule(now))
    policy.on_job_finished(job_id, worker_id, 100, out[job_id])
    return job_id


def test_shorter_predicted_jobs_of_a_tenant_go_first_once_lengths_are_known() -> None:
    outputs = {f"s{i}": 10 for i in range(4)} | {f"l{i}": 1000 for i in range(4)}
    served: dict[bool, list[str]] = {}
    for aware in (False, True):
        p = policy(aware)
        # learning: long and short jobs of different prompt sizes, one at a time
        for i in range(3):
            for name, prompt in ((f"s{i}", 100), (f"l{i}", 3000)):
                p.on_job_arrived(batch(name, "a", prompt=prompt, out=1000, at=float(i)))
                serve_one(p, float(i), outputs)
        # then a long job arrives just before a short one
        p.on_job_arrived(batch("l3", "a", prompt=3000, out=1000, at=10.0))
        p.on_job_arrived(batch("s3", "a", prompt=100, out=1000, at=10.1))
        served[aware] = [serve_one(p, 10.2, outputs), serve_one(p, 10.2, outputs)]
    assert served[False] == ["l3", "s3"]  # EDF: same window, earlier arrival first
    assert served[True] == ["s3", "l3"]


def test_a_long_job_ages_past_short_ones_that_arrive_well_after_it() -> None:
    p = policy(True)
    outputs = {f"l{i}": 1000 for i in range(4)} | {"early": 10, "late": 10}
    for i in range(3):  # the tenant's 3000-token prompts get 1000-token answers
        p.on_job_arrived(batch(f"l{i}", "a", prompt=3000, out=1000, at=0.0))
        serve_one(p, 0.0, outputs)
    # l3 queues as if it arrived (3000 + 2 * 1000) * 0.01 = 50 s later, at 51 s: a short job
    # of 10 s overtakes it, one of 60 s does not
    p.on_job_arrived(batch("l3", "a", prompt=3000, out=1000, at=1.0))
    p.on_job_arrived(batch("early", "a", prompt=100, out=10, at=10.0))
    p.on_job_arrived(batch("late", "a", prompt=100, out=10, at=60.0))
    assert [serve_one(p, 60.0, outputs) for _ in range(3)] == ["early", "l3", "late"]
