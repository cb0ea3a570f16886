"""How many times a realtime job's row is written by the worker's runner:
start and end only for a job that ends soon after its first token (the first token rides on
the end write), and a separate first-token stamp only for a job still running after
`FAIRWAY_FIRST_TOKEN_STAMP_SECONDS`, so live views see it while the job runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import event, select

from service.store import lifecycle
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.jobs import Job
from service.store.outages import REDIS, Dependencies
from service.store.settings import EngineSettings, JobSettings, Settings
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.runner import JobRunner
from worker.stream_outbox import StreamOutbox

WORKER = "writes-w"


def queued_claimed_job(database_url: str, tenant_id: uuid.UUID, max_tokens: int,
                       job_id: uuid.UUID | None = None) -> uuid.UUID:
    """A realtime job as the API inserts it and the dispatcher claims it (attempt 1)."""
    now = dt.datetime.now(dt.UTC)
    with sync_session(database_url) as session:
        job = lifecycle.new_job(
            id=job_id or uuid.uuid4(), tenant_id=tenant_id, kind="realtime",
            service_tier="default", priority=0,
            endpoint="chat.completions", model="sim-model", stream=True, max_tokens=max_tokens,
            request={"model": "sim-model", "temperature": 0, "ignore_eos": True,
                     "messages": [{"role": "user", "content": "count the writes"}]})
        session.add(job)
        session.flush()
        session.execute(lifecycle.claim(job.id, worker_id=WORKER, lease_s=30, now=now))
        session.commit()
        return job.id


class JobUpdates:
    """Counts UPDATE statements on `jobs` that the runner's engine sends."""

    def __init__(self, sessionmaker: Any) -> None:
        self.statements: list[str] = []
        engine = sessionmaker.kw["bind"].sync_engine
        event.listen(engine, "before_cursor_execute", self._seen)
        self._engine = engine

    def _seen(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # A plain UPDATE, or one inside a CTE (the end write rides with its NOTIFY).
        if re.match(r"\s*(WITH\s+\w+\s+AS\s*\()?\s*UPDATE\s+jobs", statement, re.I):
            self.statements.append(" ".join(statement.split()))

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._seen)


async def run_job(database_url: str, redis_url: str, job_id: uuid.UUID, *,
                  speed: float, stamp_s: float, while_running: Any = None) -> list[str]:
    settings = Settings(database_url=database_url, redis_url=redis_url,
                        engine=EngineSettings(kind="sim", served_model_name="sim-model"),
                        jobs=JobSettings(first_token_stamp_seconds=stamp_s))
    engine = SimEngine(SimEngineConfig(speed=speed, eos_probability=0.0))
    await engine.start()
    redis = Redis.from_url(redis_url)
    deps = Dependencies(logging.getLogger("test"))
    sessionmaker = async_sessionmaker_for(database_url)
    updates = JobUpdates(sessionmaker)
    runner = JobRunner(engine=engine, settings=settings, worker_id=WORKER,
                       sessionmaker=sessionmaker, redis=redis,
                       outbox=StreamOutbox(redis, ttl_s=60, state=deps.states[REDIS]),
                       deps=deps)
    try:
        task = asyncio.create_task(runner.run(str(job_id), 1))
        if while_running is not None:
            await while_running()
        assert await task == "succeeded"
        await asyncio.sleep(stamp_s + 0.2)  # a stamp the runner forgot to drop would land now
    finally:
        updates.close()
        await engine.shutdown()
        await redis.aclose()
    return updates.statements


def row(database_url: str, job_id: uuid.UUID) -> Job:
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(Job.id == job_id))
        assert job is not None
        return job


@pytest.mark.parametrize("stamp_s", [0.5, 0.0])
def test_a_short_job_is_written_twice_by_its_worker(database_url, test_redis_url, make_tenant,
                                                    stamp_s):
    tenant_id, _ = make_tenant()
    job_id = queued_claimed_job(database_url, tenant_id, max_tokens=4)
    statements = asyncio.run(run_job(database_url, test_redis_url, job_id, speed=float("inf"),
                                     stamp_s=stamp_s))
    # start + end; stamping at once (0) is the old way: start + first token + end.
    assert len(statements) == (2 if stamp_s else 3), statements
    assert "pg_notify" in statements[-1]  # the end's wake-up rides in the end write
    job = row(database_url, job_id)
    assert job.status == "succeeded" and job.completion_tokens == 4
    assert job.first_token_at is not None
    assert job.started_at <= job.first_token_at <= job.finished_at


def test_a_long_job_shows_its_first_token_while_running(database_url, test_redis_url,
                                                        make_tenant):
    tenant_id, _ = make_tenant()
    job_id = queued_claimed_job(database_url, tenant_id, max_tokens=400)
    seen: list[Job] = []

    async def watch() -> None:
        for _ in range(200):
            await asyncio.sleep(0.05)
            job = await asyncio.to_thread(row, database_url, job_id)
            if job.status == "running" and job.first_token_at is not None:
                seen.append(job)
                return

    statements = asyncio.run(run_job(database_url, test_redis_url, job_id, speed=1.0,
                                     stamp_s=0.2, while_running=watch))
    assert seen, "the running row never showed its first token"
    assert len(statements) == 3, statements  # start, the deferred stamp, end
    job = row(database_url, job_id)
    assert job.status == "succeeded"
    assert job.first_token_at == seen[0].first_token_at  # the end write kept the same time
