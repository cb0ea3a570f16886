"""SIGTERM to the active dispatcher hands the lock over at once: it ends its term and closes
the lock's session as it stops, and a standby, waiting on the lock itself rather than polling
it, leads within a fraction of a second (not after a poll interval, nor the leader timeout)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from functools import partial

import pytest
from redis import Redis

from service.store.heartbeats import LeaderBeat
from service.store.keys import LEADER_KEY
from tests.support.services import claim_redis_db, release_redis_db
from tests.support.stack import Proc, Stack, wait_until

TAKEOVER_S = 0.4  # was 0.5-0.9 s: the leader's wait for a wake-up, then a standby's poll


@pytest.fixture
def two_dispatchers(private_database_url: str) -> Iterator[Stack]:
    redis_url = claim_redis_db()
    stack = Stack(private_database_url, redis_url,
                  env_overrides={"FAIRWAY_LEADER_TIMEOUT_SECONDS": "5"})
    try:
        stack.start_dispatcher("d1")
        stack.start_dispatcher("d2")
        yield stack
    finally:
        stack.stop()
        release_redis_db(redis_url)


def _standing_by(proc: Proc) -> bool:
    return "standing by" in proc.log_path.read_text()


def _leader_pid(redis: Redis) -> int | None:
    beat = LeaderBeat.decode(redis.get(LEADER_KEY))
    return int(beat.dispatcher.rsplit("-", 1)[1]) if beat else None


def test_sigterm_hands_the_lock_over_at_once(two_dispatchers: Stack) -> None:
    stack = two_dispatchers
    redis = Redis.from_url(stack.redis_url)
    wait_until(lambda: _leader_pid(redis) is not None, 60, "a leader", stack)
    wait_until(lambda: any(_standing_by(p) for p in stack.procs.values()), 60, "a standby",
               stack)
    procs: dict[int, Proc] = {p.popen.pid: p for p in stack.procs.values()}
    active = procs[_leader_pid(redis) or 0]
    standby = next(p for p in procs.values() if p is not active)
    redis.delete(LEADER_KEY)  # whoever writes it next leads
    time.sleep(0.6)
    assert _leader_pid(redis) == active.popen.pid
    takeovers = []
    for i in range(3):  # each standby in turn
        os.kill(active.popen.pid, signal.SIGTERM)
        sent = time.monotonic()
        while _leader_pid(redis) != standby.popen.pid:  # the stopping one exits meanwhile
            assert time.monotonic() - sent < 10, "no takeover"
            time.sleep(0.005)
        takeovers.append(time.monotonic() - sent)
        assert active.popen.wait(10) == 0
        stack.procs.pop(active.name)
        active, standby = standby, stack.start_dispatcher(f"d{i + 3}")
        wait_until(partial(_standing_by, standby), 60, "a standby", stack)
    assert sorted(takeovers)[1] < TAKEOVER_S, takeovers  # the median: one slow start aside
