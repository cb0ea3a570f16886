"""A worker restarted under the same id, faster than the dispatcher's dead-worker delay, is a
new process: what the old one held is re-queued at once, not when its leases run out."""

from __future__ import annotations

import json
import time

import pytest
from redis import Redis

from scheduler.dispatcher.loop import Dispatcher
from service.store.keys import worker_key
from service.store.settings import Settings


def _beat(redis: Redis, worker_id: str, incarnation: str) -> None:
    redis.set(worker_key(worker_id), json.dumps({
        "worker_id": worker_id, "models": ["m"], "max_slots": 4, "running": 0,
        "kv_capacity_tokens": 10_000, "ts": time.time(), "incarnation": incarnation}), ex=30)


def test_a_new_incarnation_counts_as_the_old_one_lost(settings: Settings,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dispatcher = Dispatcher(settings)
    lost: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatcher, "_worker_lost",  # other stacks' workers share this db
                        lambda w, why="": w == "inc-w" and lost.append((w, why)))
    redis = Redis.from_url(settings.redis_url)
    _beat(redis, "inc-w", "100-1.0")
    dispatcher._refresh_workers()
    _beat(redis, "inc-w", "100-1.0")  # the same process beating again
    dispatcher._refresh_workers()
    assert lost == []
    _beat(redis, "inc-w", "200-9.0")  # kill -9, then started again under the same id
    dispatcher._refresh_workers()
    assert lost == [("inc-w", "was restarted")]
    assert "inc-w" in dispatcher.workers
    redis.delete(worker_key("inc-w"))
