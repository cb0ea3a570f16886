"""A worker restarted under the same id, faster than the dispatcher's dead-worker delay, is a
new process: what the old one held is re-queued at once, not when its leases run out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from redis import Redis

from scheduler.dispatcher.loop import Dispatcher
from service.store.keys import worker_key
from service.store.settings import JobSettings, Settings
from tests.support.services import claim_redis_db, release_redis_db


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


@pytest.fixture
def lonely_settings(database_url: str) -> Iterator[Settings]:
    """A Redis db of its own: no other stack's worker beats in it."""
    url = claim_redis_db()
    yield Settings(database_url=database_url, redis_url=url,
                   jobs=JobSettings(lease_seconds=1.0))
    release_redis_db(url)


def test_a_lone_worker_gone_silent_is_left_to_its_leases(lonely_settings: Settings,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Its key expired while a long CPU prefill starved it (it was taken for dead and 10 of a
    burst's 32 jobs re-ran): with no worker beating at all, nothing is re-queued for up to a
    lease; after that the worker is lost as before."""
    dispatcher = Dispatcher(lonely_settings)
    lost: list[str] = []
    monkeypatch.setattr(dispatcher, "_worker_lost", lambda w, why="": lost.append(w))
    redis = Redis.from_url(lonely_settings.redis_url)
    _beat(redis, "lone-w", "100-1.0")
    dispatcher._refresh_workers()
    redis.delete(worker_key("lone-w"))  # its key expired: every worker silent at once
    dispatcher._refresh_workers()
    assert lost == [] and dispatcher.workers == {"lone-w"}
    _beat(redis, "lone-w", "100-1.0")  # it beats again: nothing was lost
    dispatcher._refresh_workers()
    redis.delete(worker_key("lone-w"))
    dispatcher._refresh_workers()
    time.sleep(1.1)  # silent for longer than a lease: the leases have run out anyway
    dispatcher._refresh_workers()
    assert lost == ["lone-w"]
