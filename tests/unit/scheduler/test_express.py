"""The express path's tickets (scheduler.policies.express_grants): lent only where a pass would
place a new realtime job at once, and a job placed with one is charged as the pass would charge
it."""

from __future__ import annotations

from sched_helpers import assigns, batch, rt, worker

from scheduler.policies import FairwayConfig, FairwayPolicy, make_policy
from scheduler.types import ExpressGrant

NO_HEADROOM = FairwayConfig(headroom_enabled=False)


def policy_with(*workers: tuple[str, int, int]) -> FairwayPolicy:
    """Workers as (id, slots, running)."""
    policy = FairwayPolicy(NO_HEADROOM)
    for worker_id, slots, running in workers:
        policy.on_worker_heartbeat(worker(worker_id, slots=slots, running=running))
    policy.schedule(0.0)
    return policy


def test_tickets_go_to_where_a_pass_would_place_realtime() -> None:
    policy = policy_with(("busy", 4, 3), ("idle", 4, 0))
    assert policy.express(0.0, {}, 2) == [ExpressGrant("m", "idle", 2)]


def test_tickets_are_capped_by_the_free_slots_less_those_held() -> None:
    policy = policy_with(("w", 4, 2))
    assert policy.express(0.0, {}, 8) == [ExpressGrant("m", "w", 2)]
    assert policy.express(0.0, {"w": 1}, 8) == [ExpressGrant("m", "w", 1)]
    assert policy.express(0.0, {"w": 2}, 8) == []


def test_no_tickets_while_realtime_waits_or_when_off() -> None:
    policy = policy_with(("w", 1, 1))
    policy.on_job_arrived(rt("waiting"))
    assert policy.schedule(0.0) == []  # no room: it waits at the realtime level
    policy.on_worker_heartbeat(worker("w2", slots=4))
    assert policy.express(0.0, {}, 2) == []  # a pass places the waiting job first
    assert policy_with(("w", 4, 0)).express(0.0, {}, 0) == []


def test_a_model_without_workers_gets_none_and_each_model_its_own() -> None:
    policy = FairwayPolicy(NO_HEADROOM)
    policy.on_worker_heartbeat(worker("wa", models=("a",)))
    policy.on_worker_heartbeat(worker("wb", models=("b",)))
    grants = sorted(policy.express(0.0, {}, 1), key=lambda g: g.model)
    assert grants == [ExpressGrant("a", "wa", 1), ExpressGrant("b", "wb", 1)]


def test_a_placed_job_takes_its_slot_and_its_tenants_charge() -> None:
    policy = policy_with(("w", 2, 0))
    assert policy.on_job_placed(rt("fast", "a", prompt=1000, out=100), "w")
    assert policy.worker_of("fast") == "w"
    assert policy.express(0.0, {}, 8) == [ExpressGrant("m", "w", 1)]
    # Tenant a was charged for its placed job, so b's realtime goes first for the last slot.
    policy.on_job_arrived(rt("b1", "b"))
    policy.on_job_arrived(rt("a2", "a"))
    assert assigns(policy.schedule(0.0)) == [("b1", "w")]
    # Its end frees the slot as for any assigned job.
    policy.on_job_finished("fast", "w", 1000, 100)
    assert policy.worker_of("fast") is None
    assert assigns(policy.schedule(0.0)) == [("a2", "w")]


def test_a_placed_job_on_an_unknown_worker_is_refused_for_the_queue() -> None:
    policy = policy_with(("w", 2, 0))
    assert not policy.on_job_placed(rt("x"), "gone")
    assert not policy.on_job_placed(rt("y", model="other"), "w")
    fcfs = make_policy("fcfs")
    assert not fcfs.on_job_placed(rt("z"), "w")
    assert fcfs.express(0.0, {}, 2) == []  # no workers


def test_the_baselines_lend_to_their_least_loaded_worker_while_nothing_waits() -> None:
    policy = make_policy("priority")
    policy.on_worker_heartbeat(worker("busy", slots=4, running=3))
    policy.on_worker_heartbeat(worker("idle", slots=4, running=0))
    assert policy.express(0.0, {}, 8) == [ExpressGrant("m", "idle", 4)]
    assert policy.express(0.0, {"idle": 1}, 2) == [ExpressGrant("m", "idle", 2)]
    assert policy.on_job_placed(rt("p1"), "idle")
    assert policy.express(0.0, {}, 8) == [ExpressGrant("m", "idle", 3)]
    policy.on_worker_heartbeat(worker("idle", slots=4, running=4))
    policy.on_worker_heartbeat(worker("busy", slots=4, running=4))
    policy.on_job_arrived(rt("queued"))
    assert policy.schedule(0.0) == []
    policy.on_worker_heartbeat(worker("idle", slots=4, running=0))
    assert policy.express(0.0, {}, 8) == []  # a job waits: the pass places it first


def test_a_placed_job_a_rescan_queued_first_leaves_the_queue() -> None:
    policy = policy_with(("w", 1, 1))
    policy.on_job_arrived(rt("fast"))
    assert policy.schedule(0.0) == []
    policy.on_worker_heartbeat(worker("w2", slots=2))
    assert policy.on_job_placed(rt("fast"), "w2")
    assert policy.num_queued() == 0
    assert policy.on_job_placed(rt("fast"), "w2")  # heard twice: one slot still
    assert policy.express(0.0, {}, 8) == [ExpressGrant("m", "w2", 1)]


def test_batch_waiting_does_not_stop_tickets() -> None:
    policy = policy_with(("w", 2, 1))
    policy.on_job_arrived(batch("b"))
    policy.on_job_arrived(batch("b2"))
    policy.schedule(0.0)  # the one free slot goes to batch
    assert policy.express(0.0, {}, 2) == []


def test_a_placed_job_is_charged_by_its_tenants_weight_and_banks_no_idle_credit() -> None:
    policy = policy_with(("w", 8, 0))
    assert policy.on_job_placed(rt("h1", "heavy", prompt=100, out=0, weight=4.0), "w")
    counters = policy.counters[0]
    assert counters.value("heavy") == 25.0  # 100 prompt tokens at weight 4
    assert policy.on_job_placed(rt("h2", "heavy", prompt=100, out=0, weight=4.0), "w")
    # A tenant back from idle is lifted to the floor (the last pick's counter, 25 when h2
    # was picked), as an arrival would be.
    assert policy.on_job_placed(rt("l1", "late", prompt=10, out=0), "w")
    assert counters.value("late") == 25.0 + 10.0
