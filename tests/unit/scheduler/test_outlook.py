"""The outlook the API admits with predicts what the policy predicts for the same job."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduler.outlook import (
    RealtimeOutlook,
    admitted_ahead,
    alone_ttft,
    door_refusal,
    predict_new_ttft,
    queue_wait_s,
)
from scheduler.policies import FairwayConfig, make_policy
from scheduler.policies.admission import predict_ttft
from scheduler.policies.fairway import FairwayPolicy
from scheduler.types import JobClass, JobView, WorkerView

MODEL = "m"


def _worker(wid: str, running: int = 0) -> WorkerView:
    return WorkerView(worker_id=wid, models=(MODEL,), max_slots=4, running=running,
                      kv_capacity_tokens=100_000, kv_used_tokens=0, last_seen=0.0,
                      assigned={})


def _job(i: int, prompt: int = 300) -> JobView:
    return JobView(job_id=f"j{i}", tenant_id="t", job_class=JobClass.REALTIME, priority=1,
                   model=MODEL, arrival=100.0, deadline=None, prompt_tokens=prompt,
                   max_tokens=64)


@pytest.mark.parametrize("queued", [0, 3, 9, 25])
def test_the_outlook_predicts_as_the_policy_does(queued: int) -> None:
    policy = make_policy("fairway", FairwayConfig())
    assert isinstance(policy, FairwayPolicy)
    for wid in ("w1", "w2"):
        policy.on_worker_heartbeat(_worker(wid))
    for i in range(queued):
        policy.on_job_arrived(_job(i))
    (outlook,) = policy.outlook(100.0)
    sizes = replace(policy.admission.realtime_size)  # as the outlook saw them (its ask
    newcomer = _job(999, prompt=200)                 # moves them, with none queued yet)
    policy.on_job_arrived(newcomer)  # now it is queued, as the policy would judge it
    pool = policy.fleet.pools[MODEL]
    cost = pool.cost or FairwayConfig().default_cost
    expected = predict_ttft(newcomer, pool, 100.0, cost, sizes)
    assert predict_new_ttft(outlook, prompt_tokens=200) == pytest.approx(expected)


def test_jobs_admitted_since_the_outlook_count_against_the_next() -> None:
    policy = make_policy("fairway", FairwayConfig())
    policy.on_worker_heartbeat(_worker("w1"))
    (outlook,) = policy.outlook(0.0)
    waits = [predict_new_ttft(outlook, prompt_tokens=100, extra_jobs=k) for k in (0, 4, 40)]
    assert waits[0] < waits[1] < waits[2]


def _busy_outlook() -> RealtimeOutlook:
    """Two workers with 40 realtime jobs queued."""
    policy = make_policy("fairway", FairwayConfig())
    for wid in ("w1", "w2"):
        policy.on_worker_heartbeat(_worker(wid))
    for i in range(40):
        policy.on_job_arrived(_job(i))
    (outlook,) = policy.outlook(100.0)
    return outlook


def test_the_door_refuses_above_its_share_of_the_target_unless_alone_misses_too() -> None:
    outlook = _busy_outlook()
    predicted = predict_new_ttft(outlook, prompt_tokens=200, extra_jobs=2)
    # admitted below 0.7 of the target, refused above it with the overshoot as Retry-After
    assert door_refusal(outlook, prompt_tokens=200, target_s=predicted / 0.69,
                        extra_jobs=2) is None
    retry = door_refusal(outlook, prompt_tokens=200, target_s=predicted / 0.71, extra_jobs=2)
    assert retry == max(1, math.ceil(predicted - 0.7 * predicted / 0.71))
    # a target the request misses even on an idle pool: refusing relieves nothing
    tiny = alone_ttft(outlook, prompt_tokens=200) / 2
    assert door_refusal(outlook, prompt_tokens=200, target_s=tiny, extra_jobs=2) is None


def test_queue_mode_refuses_only_past_the_wait_budget_or_the_deadline() -> None:
    outlook = _busy_outlook()
    predicted = predict_new_ttft(outlook, prompt_tokens=200)
    wait = queue_wait_s(outlook, ahead=float(outlook.rt_queued), extra_jobs=0)
    assert wait > 1.0  # a busy pool: a TTFT target of a second is missed
    # shed: the TTFT target refuses it
    assert door_refusal(outlook, prompt_tokens=200, target_s=1.0) is not None
    # queue: the same request waits, within its budget and its (60 s) deadline
    assert door_refusal(outlook, prompt_tokens=200, target_s=60.0,
                        max_wait_s=wait + 0.5) is None
    # past the budget: refused, told to retry once the overshoot has drained
    retry = door_refusal(outlook, prompt_tokens=200, target_s=60.0, max_wait_s=wait - 2.5)
    assert retry == 3
    # within the budget but past its own deadline: refused as in shed mode
    assert door_refusal(outlook, prompt_tokens=200, target_s=predicted / 0.71,
                        max_wait_s=wait + 0.5) is not None


def test_slots_freed_since_the_outlook_make_room_for_the_admissions_since() -> None:
    """A full pool of 8 slots whose jobs take 1 s frees a slot every 0.125 s: four requests
    admitted in the half second since the outlook are not all still ahead."""
    full = RealtimeOutlook(model=MODEL, at=0.0, workers=2, slots_total=8, rt_load=8,
                           rt_queued_prefill=0, mean_prompt_tokens=50, job_service_s=1.0,
                           step_s=0.02, prefill_per_token_s=1e-4, prefill_step_s=0.01,
                           token_budget=512)
    prefill = 4 * 50 * 1e-4 / 2  # the four's prompts, on two workers
    at_once = queue_wait_s(full, ahead=0, extra_jobs=4)
    assert at_once == pytest.approx(prefill + 5 * 1.0 / 8)  # four ahead, then its own slot
    half_second = queue_wait_s(full, ahead=0, extra_jobs=4, elapsed_s=0.5)
    assert half_second == pytest.approx(prefill + 1 * 1.0 / 8)
    assert queue_wait_s(full, ahead=0, extra_jobs=4, elapsed_s=2.0) == pytest.approx(prefill)


def test_admissions_since_the_outlook_count_ahead_only_when_due_first() -> None:
    admitted = [("std", 11.0), ("std", 11.2), ("prem", 10.4), ("own", 12.0)]
    # a premium job due at 10.5: its own tenant's and the premium one due before it
    assert admitted_ahead(admitted, tenant="own", due_at=10.5) == 2
    # a standard one due at 11.1: also the standard one due at 11.0
    assert admitted_ahead(admitted, tenant="x", due_at=11.1) == 2
    # without a deadline or a tenant, all of them
    assert admitted_ahead(admitted, tenant="x", due_at=None) == 4
    assert admitted_ahead(admitted, tenant=None, due_at=10.5) == 4
