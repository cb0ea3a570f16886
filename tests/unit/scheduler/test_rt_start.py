"""Realtime placement by earliest predicted first token (scheduler/policies/rt_start.py)."""

from __future__ import annotations

import pytest
from sched_helpers import COST, assigns, batch, preempts, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.rt_start import residual_s
from scheduler.policies.workers import WorkerState

NO_HEADROOM = FairwayConfig(headroom_enabled=False)


def pool(n: int, config: FairwayConfig = NO_HEADROOM, slots: int = 4) -> FairwayPolicy:
    policy = FairwayPolicy(config)
    for i in range(n):
        policy.on_worker_heartbeat(worker(f"w{i}", slots=slots))
    return policy


def test_residual_extrapolates_whole_steps() -> None:
    ws = WorkerState(worker("w"), COST)
    assert residual_s(ws, 5.0) == 0.0  # no clock: as if idle
    ws.step_started_at, ws.step_s = 1.0, 0.03
    assert residual_s(ws, 1.01) == pytest.approx(0.02)
    assert residual_s(ws, 1.07) == pytest.approx(0.02)  # third step, 10 ms in
    ws.step_started_at, ws.step_s = None, 0.0  # the engine went idle
    assert residual_s(ws, 1.07) == 0.0


@pytest.mark.parametrize("soon", ["w0", "w1", "w2"])
def test_realtime_goes_to_the_worker_whose_step_ends_first(soon: str) -> None:
    policy = pool(3)
    for i in range(3):
        # Steps of 30 ms; "soon" started 28 ms ago, the others 5 ms ago.
        started = 10.0 - (0.028 if f"w{i}" == soon else 0.005)
        policy.on_worker_step(f"w{i}", started, 0.03)
    policy.on_job_arrived(rt("r1", at=10.0))
    assert assigns(policy.schedule(10.0)) == [("r1", soon)]


def test_without_step_clocks_the_old_placement_holds() -> None:
    policy = pool(2, FairwayConfig(headroom_enabled=False, rt_earliest_start=False))
    policy.on_worker_step("w0", 9.995, 0.03)  # w1's step would end sooner: ignored
    policy.on_worker_step("w1", 9.972, 0.03)
    policy.on_worker_heartbeat(worker("w1", running=2))
    policy.on_job_arrived(rt("r1", at=10.0))
    assert assigns(policy.schedule(10.0)) == [("r1", "w0")]  # least loaded


def test_simultaneous_realtime_spread_instead_of_queueing_behind_each_others_prefill() -> None:
    policy = pool(3)
    for i in range(3):
        policy.on_job_arrived(rt(f"r{i}", tenant=f"t{i}", prompt=2000))
    placed = [w for _, w in assigns(policy.schedule(0.0))]
    assert sorted(placed) == ["w0", "w1", "w2"]


def test_a_long_prefill_in_the_ledger_outweighs_a_step_residual() -> None:
    policy = pool(2)
    policy.on_job_arrived(rt("long", prompt=5000))  # 0.5 s of prefill on COST
    (first,) = assigns(policy.schedule(0.0))
    other = "w1" if first[1] == "w0" else "w0"
    policy.on_worker_step(other, 0.0, 0.05)  # a 50 ms step in flight there
    policy.on_job_arrived(rt("short", tenant="b", at=0.01))
    assert assigns(policy.schedule(0.01)) == [("short", other)]


def test_the_worker_holding_the_prefix_wins_when_its_saving_beats_the_wait() -> None:
    policy = pool(2)
    job = rt("r1", prompt=3000, prefix="sys")
    job.prefix_tokens = 2500
    policy.on_job_arrived(job)
    (home,) = (w for _, w in assigns(policy.schedule(0.0)))
    policy.on_job_finished("r1", home, 3000, 10)
    policy.on_worker_step(home, 0.99, 0.02)  # 10 ms left: saving 2500 tokens (0.25 s) wins
    later = rt("r2", at=1.0, prompt=3000, prefix="sys")
    later.prefix_tokens = 2500
    policy.on_job_arrived(later)
    assert assigns(policy.schedule(1.0)) == [("r2", home)]


def test_preemption_for_realtime_prefers_the_worker_that_starts_it_sooner() -> None:
    policy = pool(2, slots=1)
    policy.on_job_arrived(batch("b0", tenant="x", prompt=100))
    policy.on_job_arrived(batch("b1", tenant="y", prompt=100))
    placed = dict(assigns(policy.schedule(0.0)))
    # Equal victims on both; w1's step ends in 2 ms, w0's in 25 ms.
    policy.on_worker_step("w0", 0.995, 0.03)
    policy.on_worker_step("w1", 0.972, 0.03)
    policy.on_job_arrived(rt("r1", at=1.0))
    decisions = policy.schedule(1.0)
    victim_on_w1 = next(j for j, w in placed.items() if w == "w1")
    assert preempts(decisions) == [victim_on_w1]
    assert assigns(decisions) == [("r1", "w1")]


@pytest.mark.parametrize(("prompt", "preempts_there"), [(100, True), (20_000, False)])
def test_realtime_preempts_where_the_step_ends_first_only_if_the_recompute_is_worth_it(
    prompt: int, preempts_there: bool
) -> None:
    policy = pool(2, slots=2)
    for i in range(3):
        policy.on_job_arrived(batch(f"b{i}", tenant=f"t{i}", prompt=prompt, out=10))
    placed = dict(assigns(policy.schedule(0.0)))
    counts = {w: list(placed.values()).count(w) for w in ("w0", "w1")}
    full = max(counts, key=lambda w: counts[w])
    free = "w1" if full == "w0" else "w0"
    policy.on_worker_step(full, 0.971, 0.03)  # ends in 1 ms
    policy.on_worker_step(free, 0.995, 0.03)  # ends in 25 ms
    policy.on_job_arrived(rt("r1", at=1.0))
    decisions = policy.schedule(1.0)
    if preempts_there:  # 100 tokens of recompute (~1 ms at the 0.1 weight) < 24 ms sooner
        assert assigns(decisions) == [("r1", full)] and len(preempts(decisions)) == 1
    else:  # 20k tokens (0.2 s) is not worth 24 ms: the free slot is used
        assert assigns(decisions) == [("r1", free)] and preempts(decisions) == []
