"""The worker's stream outbox against a real Redis: the entries of every job written in one
turn of the event loop go in one pipeline (one round trip per engine step, not one
per job), each job's entries in order, an end entry expiring its stream; a Redis that is away
leaves the entries waiting, not raised, and they arrive once it is back."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from redis.asyncio import Redis

from service.store import job_stream
from service.store.keys import stream_key
from service.store.outages import DependencyState
from worker.stream_outbox import StreamOutbox


class CountingRedis(Redis):
    """Counts the pipelines sent (the round trips of the outbox's writes)."""

    pipelines = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        type(self).pipelines += 1
        return super().pipeline(*args, **kwargs)


def _outbox(url: str, **kwargs: Any) -> tuple[StreamOutbox, Redis]:
    redis = CountingRedis.from_url(url)
    state = DependencyState("redis-test", logging.getLogger("test"))
    return StreamOutbox(redis, ttl_s=60, state=state, **kwargs), redis


def _texts(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[str]:
    return [fields.get(b"text", b"").decode() for _, fields in entries]


def test_one_turns_entries_of_many_jobs_go_in_one_pipeline(test_redis_url: str) -> None:
    jobs = [uuid.uuid4() for _ in range(6)]

    async def run() -> None:
        outbox, redis = _outbox(test_redis_url)
        try:
            CountingRedis.pipelines = 0
            await asyncio.gather(*(outbox.put(j, job_stream.Delta(1, "a", 1, 0)) for j in jobs))
            assert CountingRedis.pipelines == 1  # not one per job
            await asyncio.gather(*(outbox.put(j, job_stream.Delta(1, "b", 1, 1)) for j in jobs))
            await asyncio.gather(*(outbox.put(j, job_stream.Final(1, "stop", 3, 2))
                                   for j in jobs[:3]))
            assert CountingRedis.pipelines == 3
            for i, job in enumerate(jobs):
                key = stream_key(job)
                entries = await redis.xrange(key)
                assert _texts(entries)[:2] == ["a", "b"]
                assert len(entries) == (3 if i < 3 else 2)
                ttl = await redis.ttl(key)
                assert (0 < ttl <= 60) if i < 3 else ttl == -1  # only ended streams expire
        finally:
            await redis.delete(*(stream_key(j) for j in jobs))
            await redis.aclose()

    asyncio.run(run())


def test_entries_wait_through_an_outage_and_arrive_in_order(test_redis_url: str) -> None:
    job = uuid.uuid4()

    async def run() -> None:
        outbox, redis = _outbox(test_redis_url, retry_s=0.05)
        live = outbox.redis
        outbox.redis = Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens: refused
        deliver = asyncio.create_task(outbox.deliver_forever())
        try:
            await outbox.put(job, job_stream.Delta(1, "x", 1, 0))  # does not raise
            await outbox.put(job, job_stream.Delta(1, "y", 1, 1))
            assert outbox.pending_jobs == 1 and not outbox.state.up
            outbox.redis = live  # Redis is back
            for _ in range(100):
                if not outbox.pending_jobs:
                    break
                await asyncio.sleep(0.02)
            assert outbox.pending_jobs == 0 and outbox.state.up
            # The two waiting deltas were merged into one entry, in order.
            assert _texts(await redis.xrange(stream_key(job))) == ["xy"]
        finally:
            deliver.cancel()
            await redis.delete(stream_key(job))
            await redis.aclose()

    asyncio.run(run())
