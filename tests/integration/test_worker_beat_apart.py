"""A worker's beat in Redis and its lease renewal in Postgres run apart: a Postgres that hangs
(not refuses: a cut link, packets dropped) holds the renewal and not the beat, so the leader
does not count the worker lost and re-queue all it runs (seen in `fairway chaos --hosts`,
worker cut from Postgres: 14-15 jobs re-queued each run)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from redis import Redis as SyncRedis

from service.store.keys import worker_key
from service.store.settings import EngineSettings, Settings, WorkerSettings
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.host import EngineHost

pytestmark = pytest.mark.integration
BEAT_S = 0.2


def beat_of(redis_url: str, worker_id: str) -> dict[str, object] | None:
    raw = SyncRedis.from_url(redis_url).get(worker_key(worker_id))
    return None if raw is None else dict(json.loads(raw))


def test_a_hung_lease_renewal_does_not_hold_the_beat(database_url: str,
                                                     test_redis_url: str) -> None:
    settings = Settings(database_url=database_url, redis_url=test_redis_url,
                        engine=EngineSettings(kind="sim"),
                        worker=WorkerSettings(heartbeat_seconds=BEAT_S))
    host = EngineHost(SimEngine(SimEngineConfig()), settings, "beat-apart")
    hung = asyncio.Event()
    renewals = 0
    renew = host._renew_leases

    async def renew_or_hang() -> None:
        nonlocal renewals
        renewals += 1
        if hung.is_set():
            await asyncio.Event().wait()  # Postgres holds the query: no answer, no error
        await renew()

    host._renew_leases = renew_or_hang  # type: ignore[method-assign]
    host.start()
    try:
        host.loop.call_soon_threadsafe(hung.set)
        time.sleep(3 * BEAT_S)  # the renewal now hangs
        first = beat_of(test_redis_url, "beat-apart")
        time.sleep(4 * BEAT_S)
        later = beat_of(test_redis_url, "beat-apart")
        assert first is not None and later is not None
        assert float(str(later["ts"])) > float(str(first["ts"])), (first["ts"], later["ts"])
        assert renewals >= 2  # the renewal did start, and hangs
    finally:
        host.loop.call_soon_threadsafe(hung.clear)
        host.stop()
