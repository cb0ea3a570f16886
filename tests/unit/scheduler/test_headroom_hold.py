"""The realtime reserve (scheduler/policies/workers.py, Headroom): a burst margin over the
realtime load seen, which lapses once a worker has held no realtime for ``hold_s``, however
long the load's mean remembers it."""

from __future__ import annotations

from sched_helpers import COST, batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.policies.workers import AssignedJob, Headroom, WorkerState


def _headroom(hold_s: float = 10.0) -> Headroom:
    return Headroom(tau_s=30.0, k=2.0, min_slots=0, max_frac=0.5, hold_s=hold_s)


def _worker_after_realtime(until: float) -> WorkerState:
    """A worker of 8 slots that held one realtime job from 0 to ``until``."""
    ws = WorkerState(worker("w", slots=8), COST)
    job = rt("r1")
    ws.add(AssignedJob(job, 0.0, 150, 0), 0.0, 30.0)
    ws.remove(job.job_id, until, 30.0)
    return ws


def test_the_reserve_holds_while_realtime_was_here_lately() -> None:
    ws, headroom = _worker_after_realtime(6.0), _headroom()
    assert ws.rt_ewma > 0.05
    assert headroom.reserve(ws, 6.0)[0] == 2  # ceil(m + 2 sqrt(m)), m = 0.18
    assert headroom.reserve(ws, 15.9)[0] >= 1  # 9.9 s since it left


def test_the_reserve_lapses_after_the_hold_though_the_mean_remembers() -> None:
    ws, headroom = _worker_after_realtime(6.0), _headroom()
    slots, kv = headroom.reserve(ws, 16.1)
    assert (slots, kv) == (0, 0)
    assert ws.rt_ewma > 0.05  # the mean alone would still keep a slot
    assert _headroom(hold_s=float("inf")).reserve(ws, 16.1)[0] >= 1


def test_realtime_held_now_keeps_the_reserve_past_the_hold() -> None:
    ws, headroom = _worker_after_realtime(1.0), _headroom()
    ws.add(AssignedJob(rt("r2"), 2.0, 150, 0), 2.0, 30.0)  # still running at 60 s
    assert headroom.reserve(ws, 60.0)[0] >= 1


def test_batch_takes_every_slot_once_the_hold_has_passed() -> None:
    policy = FairwayPolicy(FairwayConfig(headroom_hold_s=10.0))
    policy.on_worker_heartbeat(worker("w", slots=4))
    policy.on_job_arrived(rt("r", at=0.0))
    policy.schedule(0.0)
    policy.schedule(6.0)
    policy.on_job_finished("r", "w", 100, 50)  # ended at the last pass's clock, 6 s
    for i in range(4):
        policy.on_job_arrived(batch(f"b{i}", at=7.0))
    early = policy.schedule(7.0)
    late = policy.schedule(15.5)
    assert len(early) == 2  # two of four slots kept for realtime (at most half)
    # 9.5 s since realtime left: the mean has decayed to a one-slot reserve, still kept.
    assert len(late) == 1
    assert len(policy.schedule(16.5)) == 1  # the hold passed: batch takes the last slot


def _worker_after_a_burst(gap_s: float, n: int = 8) -> WorkerState:
    """A worker of 8 slots that held ``n`` realtime jobs arriving ``gap_s`` apart, each for 1 s;
    the last left at ``(n - 1) * gap_s + 1``."""
    ws = WorkerState(worker("w", slots=8), COST)
    for i in range(n):
        ws.add(AssignedJob(rt(f"r{i}"), i * gap_s, 150, 0), i * gap_s, 30.0)
    for i in range(n):
        ws.remove(f"r{i}", i * gap_s + 1.0, 30.0)
    return ws


def test_a_dense_burst_frees_its_reserve_after_a_few_of_its_gaps() -> None:
    ws, headroom = _worker_after_a_burst(0.5), _headroom()
    headroom.hold_gaps = 4.0
    left = 7 * 0.5 + 1.0
    assert ws.rt_gap_s == 0.5
    assert headroom.reserve(ws, left + 1.9)[0] >= 1  # within 4 gaps of 0.5 s
    assert headroom.reserve(ws, left + 2.1) == (0, 0)  # not the 10 s hold
    assert ws.rt_ewma > 0.05  # the mean alone would still keep a slot


def test_a_sparse_stream_keeps_the_whole_hold() -> None:
    ws, headroom = _worker_after_a_burst(5.0, n=3), _headroom()
    headroom.hold_gaps = 4.0
    left = 2 * 5.0 + 1.0
    assert headroom.hold(ws) == 10.0  # 4 gaps of 5 s are past the 10 s cap
    assert headroom.reserve(ws, left + 9.9)[0] >= 1
    assert headroom.reserve(ws, left + 10.1) == (0, 0)


def _placed_after_realtime(n_batch: int, yield_waves: float = 1.0) -> int:
    """Batch jobs placed on a 4-slot worker 1 s after realtime left it (the reserve held)."""
    policy = FairwayPolicy(FairwayConfig(headroom_hold_s=10.0, headroom_yield_waves=yield_waves))
    policy.on_worker_heartbeat(worker("w", slots=4))
    policy.on_job_arrived(rt("r", at=0.0))
    policy.schedule(0.0)
    policy.schedule(6.0)
    policy.on_job_finished("r", "w", 100, 50)
    for i in range(n_batch):
        policy.on_job_arrived(batch(f"b{i}", at=7.0))
    return len(policy.schedule(7.0))


def test_the_reserve_yields_while_a_full_wave_of_batch_waits_behind() -> None:
    assert _placed_after_realtime(12) == 4  # 8 still wait: a slot held would idle a wave
    assert _placed_after_realtime(12, yield_waves=float("inf")) == 2
    # 6 jobs: the first two go while 4 (a pool-full) wait behind, then the reserve holds.
    assert _placed_after_realtime(6) == 2
    assert _placed_after_realtime(4) == 2
