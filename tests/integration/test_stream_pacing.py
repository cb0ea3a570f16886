"""A streamed flex job's text reaches Redis in merged entries, at most one per
`batch_stream_interval_ms` after its first; a realtime job's every token goes at once; and
nothing is lost either way: the entries spell the job's whole output, and the end comes
after the last text."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid

import pytest
from redis.asyncio import Redis

from service.store import job_stream, lifecycle
from service.store.db import async_sessionmaker_for, sync_session
from service.store.keys import stream_key
from service.store.outages import REDIS, Dependencies
from service.store.settings import EngineSettings, Settings, WorkerSettings
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.runner import JobRunner
from worker.stream_outbox import StreamOutbox

WORKER = "pacing-w"
TOKENS = 60


def claimed_job(database_url: str, tenant_id: uuid.UUID, tier: str, priority: int) -> uuid.UUID:
    with sync_session(database_url) as session:
        job = lifecycle.new_job(
            id=uuid.uuid4(), tenant_id=tenant_id, kind="realtime", service_tier=tier,
            priority=priority, endpoint="chat.completions", model="sim-model", stream=True,
            max_tokens=TOKENS,
            request={"model": "sim-model", "temperature": 0, "ignore_eos": True,
                     "messages": [{"role": "user", "content": "pace the stream"}]})
        session.add(job)
        session.flush()
        session.execute(lifecycle.claim(job.id, worker_id=WORKER, lease_s=30,
                                        now=dt.datetime.now(dt.UTC)))
        session.commit()
        return job.id


async def run_and_read(database_url: str, redis_url: str, job_id: uuid.UUID,
                       interval_ms: int) -> list[job_stream.Entry]:
    settings = Settings(database_url=database_url, redis_url=redis_url,
                        engine=EngineSettings(kind="sim", served_model_name="sim-model"),
                        worker=WorkerSettings(batch_stream_interval_ms=interval_ms))
    # The sim's step is 20 ms at speed 1: 60 tokens take about 1.2 s.
    engine = SimEngine(SimEngineConfig(speed=1.0, eos_probability=0.0))
    await engine.start()
    redis = Redis.from_url(redis_url)
    deps = Dependencies(logging.getLogger("test"))
    runner = JobRunner(engine=engine, settings=settings, worker_id=WORKER,
                       sessionmaker=async_sessionmaker_for(database_url), redis=redis,
                       outbox=StreamOutbox(redis, ttl_s=60, state=deps.states[REDIS]),
                       deps=deps)
    try:
        assert await runner.run(str(job_id), 1) == "succeeded"
        raw = await redis.xrange(stream_key(job_id))
    finally:
        await engine.shutdown()
        await redis.aclose()
    entries = [job_stream.parse(fields) for _, fields in raw]
    assert all(e is not None for e in entries)
    return [e for e in entries if e is not None]


def texts(entries: list[job_stream.Entry]) -> list[job_stream.Delta]:
    deltas = [e for e in entries if isinstance(e, job_stream.Delta)]
    assert isinstance(entries[-1], job_stream.Final) and len(deltas) == len(entries) - 1
    offset = 0
    for d in deltas:  # contiguous: each entry starts where the last ended
        assert d.offset == offset
        offset += len(d.text)
    assert sum(d.tokens for d in deltas) == TOKENS
    return deltas


def test_a_flex_stream_is_merged_and_a_realtime_one_is_not(database_url, test_redis_url,
                                                          make_tenant):
    tenant_id, _ = make_tenant()
    flex = claimed_job(database_url, tenant_id, "flex", priority=2)
    realtime = claimed_job(database_url, tenant_id, "default", priority=1)
    flex_deltas = texts(asyncio.run(run_and_read(database_url, test_redis_url, flex, 250)))
    rt_deltas = texts(asyncio.run(run_and_read(database_url, test_redis_url, realtime, 250)))
    assert len(rt_deltas) == TOKENS
    assert flex_deltas[0].tokens == 1  # the first token is not held
    # About 1.2 s of tokens at one entry per 250 ms, plus the first and the end's flush.
    assert 3 <= len(flex_deltas) <= 10, [d.tokens for d in flex_deltas]
    assert "".join(d.text for d in flex_deltas) == "".join(d.text for d in rt_deltas)


@pytest.mark.parametrize("interval_ms", [0])
def test_an_interval_of_zero_streams_flex_by_the_token(database_url, test_redis_url,
                                                      make_tenant, interval_ms):
    tenant_id, _ = make_tenant()
    flex = claimed_job(database_url, tenant_id, "flex", priority=2)
    deltas = texts(asyncio.run(run_and_read(database_url, test_redis_url, flex, interval_ms)))
    assert len(deltas) == TOKENS
