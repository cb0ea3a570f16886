"""The realtime lane (FairwayConfig.rt_lane): realtime on workers cleared of batch."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import assigns, batch, preempts, rt, worker
from test_properties import job_st, make_job, make_pool, worker_st

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import Reject

LANE = FairwayConfig(headroom_enabled=False, rt_lane=True, lane_hold_s=10.0)


def two_workers(config: FairwayConfig = LANE) -> FairwayPolicy:
    policy = FairwayPolicy(config)
    for i in range(2):
        policy.on_worker_heartbeat(worker(f"w{i}", slots=4))
    return policy


def test_realtime_clears_a_lane_worker_and_batch_stays_off_it() -> None:
    policy = two_workers()
    for i in range(8):
        policy.on_job_arrived(batch(f"b{i}"))
    assert len(assigns(policy.schedule(0.0))) == 8  # no realtime yet: batch fills both
    policy.on_job_arrived(rt("r", at=1.0, slo=60.0))
    decisions = policy.schedule(1.0)
    lane_worker = policy.worker_of("r")
    assert lane_worker is not None
    victims = preempts(decisions)
    assert len(victims) == 4 and all(policy.worker_of(v) is None for v in victims)
    for v in victims:  # the dispatcher carries the preemptions out; the jobs come back
        policy.on_job_finished(v, lane_worker, 0, 0)
        policy.on_job_arrived(batch(v, at=1.0))
    policy.on_job_arrived(batch("late", at=1.0))
    placed = assigns(policy.schedule(1.1))
    assert all(w != lane_worker for _, w in placed)


def test_lane_dissolves_after_the_hold_and_batch_fills_it_again() -> None:
    policy = two_workers()
    policy.on_job_arrived(rt("r", slo=60.0))
    policy.schedule(0.0)
    lane_worker = policy.worker_of("r")
    assert lane_worker is not None
    policy.on_job_finished("r", lane_worker, 100, 50)
    for i in range(8):
        policy.on_job_arrived(batch(f"b{i}", at=1.0))
    assert len(assigns(policy.schedule(1.0))) == 4  # the lane still holds one worker
    assert len(assigns(policy.schedule(12.0))) == 4  # hold over: batch takes it back


def test_one_worker_pool_has_no_lane() -> None:
    policy = FairwayPolicy(LANE)
    policy.on_worker_heartbeat(worker("w", slots=4))
    policy.on_job_arrived(rt("r", slo=60.0))
    for i in range(3):
        policy.on_job_arrived(batch(f"b{i}"))
    assert len(assigns(policy.schedule(0.0))) == 4


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(worker_st, min_size=1, max_size=5),
    st.lists(job_st, max_size=30),
    st.lists(st.booleans(), max_size=30),
)
def test_lane_keeps_capacity_and_conserves_work_outside_the_lane(
    workers, jobs, finish_mask
) -> None:
    # Work conservation with a lane: the lane is capacity held back from batch on purpose (like
    # the headroom reserve), so a waiting batch job may see room only on lane workers; any
    # other worker with room for it is a violation, and so is realtime waiting beside room.
    config = FairwayConfig(headroom_enabled=False, rt_lane=True, lane_min_workers=1)
    policy, ledger = make_pool(workers, config)
    for round_no in range(2):
        for i, spec in enumerate(jobs):
            job = make_job(i + 100 * round_no, spec, at=float(round_no))
            ledger.jobs[job.job_id] = job
            policy.on_job_arrived(job)
        decisions = policy.schedule(float(round_no))
        ledger.apply(decisions)  # asserts no realtime victim
        rejected = {d.job_id for d in decisions if isinstance(d, Reject)}
        lane = {w for w, ws in policy.fleet.workers.items() if ws.lane}
        for worker_id in ledger.views:
            slots, kv = ledger.room(worker_id)
            assert slots >= 0 and kv >= 0, "placement exceeded capacity"
        for job_id, job in ledger.jobs.items():
            if job_id in ledger.placed or job_id in rejected or policy.level_of(job_id) is None:
                continue
            for worker_id, view in ledger.views.items():
                if job.model not in view.models:
                    continue
                if policy.level_of(job_id) == 1 and worker_id in lane:
                    continue
                slots, kv = ledger.room(worker_id)
                assert not (slots >= 1 and kv >= job.prompt_tokens + job.max_tokens), (
                    f"{job_id} waits though {worker_id} has room"
                )
        for (job_id, worker_id), done in zip(
            list(ledger.placed.items()), finish_mask, strict=False
        ):
            if done:
                del ledger.placed[job_id]
                policy.on_job_finished(job_id, worker_id, 0, 0)
