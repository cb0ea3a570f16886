"""A draining worker (SIGTERM, worker.drain) gets nothing new: no placement, no express ticket,
no victim taken there for a newcomer; it stays alive to the policy until it goes."""

from __future__ import annotations

from typing import Any

from sched_helpers import COST, assigns, batch, preempts, rt

from scheduler.dispatcher.views import worker_view
from scheduler.policies import FairwayConfig, FairwayPolicy


def _beat(worker_id: str, *, draining: bool, running: int = 0) -> dict[str, Any]:
    return {"worker_id": worker_id, "models": ["m"], "max_slots": 4, "running": running,
            "kv_usage": 0.0, "kv_capacity_tokens": 100_000, "ts": 1.0,
            "draining": draining}


def _policy(*beats: dict[str, Any]) -> FairwayPolicy:
    policy = FairwayPolicy(FairwayConfig(headroom_enabled=False))
    for beat in beats:
        view = worker_view(beat, {})
        policy.on_worker_heartbeat(view.__class__(**{**_fields(view), "cost": COST}))
    return policy


def _fields(view: Any) -> dict[str, Any]:
    return {name: getattr(view, name) for name in view.__dataclass_fields__}


def test_a_draining_worker_offers_no_room() -> None:
    view = worker_view(_beat("w", draining=True), {})
    assert (view.max_slots, view.free_slots) == (0, 0)
    assert worker_view(_beat("w", draining=False), {}).free_slots == 4


def test_nothing_is_placed_on_a_draining_worker() -> None:
    policy = _policy(_beat("old", draining=True), _beat("new", draining=False))
    for i in range(3):
        policy.on_job_arrived(rt(f"r{i}"))
        policy.on_job_arrived(batch(f"b{i}"))
    assert {w for _, w in assigns(policy.schedule(0.0))} == {"new"}
    alone = _policy(_beat("old", draining=True))
    alone.on_job_arrived(rt("r"))
    alone.on_job_arrived(batch("b"))
    assert alone.schedule(0.0) == []
    assert alone.express(0.0, {}, 2) == []


def test_no_victim_is_taken_on_a_draining_worker_for_a_newcomer() -> None:
    policy = _policy(_beat("old", draining=False))
    for i in range(4):
        policy.on_job_arrived(batch(f"b{i}"))
    assert len(assigns(policy.schedule(0.0))) == 4  # the worker is full of batch
    policy.on_worker_heartbeat(worker_view(_beat("old", draining=True, running=4), {}))
    policy.on_job_arrived(rt("r", at=1.0))
    decisions = policy.schedule(1.0)
    assert preempts(decisions) == [] and assigns(decisions) == []
