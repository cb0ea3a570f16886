"""Placement: model and room, prefix affinity with bounded load, least loaded, headroom."""

from __future__ import annotations

from sched_helpers import assigns, batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import WorkerView

NO_HEADROOM = FairwayConfig(headroom_enabled=False)


def pool_policy(n: int, slots: int = 4, config: FairwayConfig = NO_HEADROOM) -> FairwayPolicy:
    policy = FairwayPolicy(config)
    for i in range(n):
        policy.on_worker_heartbeat(worker(f"w{i}", slots=slots))
    return policy


def test_only_workers_serving_the_model() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("wa", models=("a",)))
    policy.on_worker_heartbeat(worker("wb", models=("b",)))
    policy.on_job_arrived(batch("j1", model="b"))
    assert assigns(policy.schedule(0.0)) == [("j1", "wb")]


def test_kv_room_is_respected() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("small", kv=1000))
    policy.on_worker_heartbeat(worker("big", kv=10_000, running=3))
    policy.on_job_arrived(batch("j1", prompt=4000, out=1000))
    assert assigns(policy.schedule(0.0)) == [("j1", "big")]


def test_heartbeat_load_counts_even_without_our_jobs() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w1", slots=2, running=2))
    policy.on_job_arrived(batch("j1"))
    assert policy.schedule(0.0) == []
    policy.on_worker_heartbeat(worker("w1", slots=2, running=1))
    assert assigns(policy.schedule(1.0)) == [("j1", "w1")]


def test_least_loaded_spreads_jobs() -> None:
    policy = pool_policy(3)
    for i in range(6):
        policy.on_job_arrived(batch(f"j{i}", tenant=f"t{i}"))
    placed = [w for _, w in assigns(policy.schedule(0.0))]
    assert sorted(placed) == ["w0", "w0", "w1", "w1", "w2", "w2"]


def test_shared_prefix_sticks_to_one_worker_until_the_load_bound() -> None:
    policy = pool_policy(4, slots=16)
    for i in range(3):
        policy.on_job_arrived(batch(f"p{i}", tenant=f"t{i}", prefix="sys-A"))
    placed = {w for _, w in assigns(policy.schedule(0.0))}
    assert len(placed) == 1  # load 0..2 stays within 1.25 * mean + 4
    home = placed.pop()
    for i in range(3, 12):
        policy.on_job_arrived(batch(f"p{i}", tenant=f"t{i}", prefix="sys-A"))
    later = assigns(policy.schedule(1.0))
    counts = {w: sum(1 for _, x in later if x == w) for _, w in later}
    assert counts[home] < 9  # the bound sent some elsewhere
    assert len(counts) > 1


def test_headroom_keeps_room_for_realtime_after_realtime_was_seen() -> None:
    config = FairwayConfig(headroom_tau_s=10.0, headroom_k=1.0)
    policy = FairwayPolicy(config)
    policy.on_worker_heartbeat(worker("w1", slots=4))
    policy.on_job_arrived(rt("r1"))
    policy.on_job_arrived(rt("r2"))
    assert len(assigns(policy.schedule(0.0))) == 2
    for i in range(4):
        policy.on_job_arrived(batch(f"b{i}"))
    # 30 s of two realtime jobs in flight: the EWMA is ~2, reserve ceil(2 + sqrt 2) - 2 = 2.
    assert assigns(policy.schedule(30.0)) == []
    policy.on_job_finished("r1", "w1", 100, 50)
    policy.on_job_finished("r2", "w1", 100, 50)
    placed = assigns(policy.schedule(30.0))
    assert 0 < len(placed) < 4  # the reserve holds some slots back
    assert len(assigns(policy.schedule(400.0))) + len(placed) == 4  # it decays when idle


def test_a_finished_job_frees_its_slot_before_the_next_heartbeat() -> None:
    from dataclasses import replace

    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w", slots=2))
    for job_id in ("b1", "b2", "b3"):
        policy.on_job_arrived(batch(job_id))
    assert assigns(policy.schedule(0.0)) == [("b1", "w"), ("b2", "w")]
    # The engine reports both running, then b1 finishes before the next beat.
    beat = replace(worker("w", slots=2, running=2), running_ids=frozenset({"b1", "b2"}))
    policy.on_worker_heartbeat(beat)
    policy.on_job_finished("b1", "w", 100, 10)
    assert assigns(policy.schedule(1.0)) == [("b3", "w")]


def test_a_reread_of_the_same_beat_does_not_take_a_finished_jobs_slot_back() -> None:
    """The dispatcher re-reads a worker's beat every refresh, several times per beat: the
    beat still lists the jobs that finished since, and their slots stayed taken until the
    worker's next beat (the overload bench's second-long gaps with jobs queued)."""
    from dataclasses import replace

    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w", slots=2))
    for job_id in ("b1", "b2", "b3", "b4"):
        policy.on_job_arrived(batch(job_id))
    assert assigns(policy.schedule(0.0)) == [("b1", "w"), ("b2", "w")]
    def beat() -> WorkerView:  # as read from Redis: a new object each time
        return replace(worker("w", slots=2, running=2), running_ids=frozenset({"b1", "b2"}))

    policy.on_worker_heartbeat(beat())
    policy.on_job_finished("b1", "w", 100, 10)
    policy.on_worker_heartbeat(beat())  # the same beat, read again
    assert assigns(policy.schedule(1.0)) == [("b3", "w")]
    # The worker's next beat no longer lists b1 (and lists b3): nothing is dropped from it.
    policy.on_job_finished("b2", "w", 100, 10)
    fresh = replace(worker("w", slots=2, running=1), running_ids=frozenset({"b3"}))
    policy.on_worker_heartbeat(fresh)
    assert assigns(policy.schedule(2.0)) == [("b4", "w")]
    policy.on_worker_heartbeat(replace(fresh, running=2, running_ids=frozenset({"b3", "b4"})))
    assert policy.fleet.workers["w"].used_slots() == 2


def test_a_job_back_on_the_same_worker_counts_in_its_beats_again() -> None:
    from dataclasses import replace

    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w", slots=2))
    policy.on_job_arrived(batch("b1"))
    assert assigns(policy.schedule(0.0)) == [("b1", "w")]
    policy.on_job_finished("b1", "w", 0, 5)  # parked (preempted): back to the queue
    policy.on_job_arrived(batch("b1"))
    assert assigns(policy.schedule(1.0)) == [("b1", "w")]
    policy.on_worker_heartbeat(replace(worker("w", slots=2, running=1),
                                       running_ids=frozenset({"b1"})))
    assert policy.fleet.workers["w"].view.running == 1  # its second run, not dropped


def test_without_running_ids_the_slot_waits_for_the_heartbeat() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("w", slots=2))
    for job_id in ("b1", "b2", "b3"):
        policy.on_job_arrived(batch(job_id))
    policy.schedule(0.0)
    policy.on_worker_heartbeat(worker("w", slots=2, running=2))
    policy.on_job_finished("b1", "w", 100, 10)
    assert assigns(policy.schedule(1.0)) == []  # the beat still counts b1 as running
    policy.on_worker_heartbeat(worker("w", slots=2, running=1))
    assert assigns(policy.schedule(2.0)) == [("b3", "w")]
