"""A realtime hand-off that carries its job's body starts the engine while the worker's claim
commits (service/store/handoff.py, worker/claimed_job.py; the claim leaves the time
to first token). Nothing of the attempt leaves the worker before its claim is in; a claim that
fails aborts the engine request and delivers nothing; a body the row contradicts (a checkpoint
after all) is dropped and the job runs as the row says."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import psycopg
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from sqlalchemy import update

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import async_sessionmaker_for, sync_session
from service.store.handoff import JobBody
from service.store.keys import stream_key
from service.store.models.jobs import Job
from service.store.outages import REDIS, Dependencies
from service.store.settings import EngineSettings, Settings, to_libpq_url
from tests.integration.test_job_writes import WORKER, queued_claimed_job, row
from worker.engine.base import EngineRequest, TokenDelta
from worker.engine.config import SimEngineConfig
from worker.engine.sim import SimEngine
from worker.runner import JobRunner
from worker.stream_outbox import StreamOutbox


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of its own: a job left assigned here (a failed claim) must not be re-queued
    into the shared stack's queue when its lease ends."""
    return private_database_url


@pytest.fixture
def tenant_id(database_url: str) -> uuid.UUID:
    return create_tenant_with_key(Settings(database_url=database_url), "early")[0]


class RecordingEngine(SimEngine):
    """The sim engine, noting when each request reaches it."""

    def __init__(self, config: SimEngineConfig) -> None:
        super().__init__(config)
        self.submitted: list[str] = []
        self.aborted: list[str] = []
        self.runner: JobRunner | None = None

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        await super().abort(request_id)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[TokenDelta, None]:
        self.submitted.append(request.request_id)
        async with contextlib.aclosing(super().generate(request)) as deltas:
            async for delta in deltas:
                yield delta


def body_of(database_url: str, job_id: uuid.UUID) -> JobBody:
    job = row(database_url, job_id)
    return JobBody(job.endpoint, job.request, job.max_tokens, job.priority, str(job.tenant_id))


async def run_early(database_url: str, redis_url: str, job_id: uuid.UUID, attempt: int,
                    body: JobBody, *, speed: float, meanwhile: Any = None,
                    ahead: bool = False, engine_type: type[RecordingEngine] = RecordingEngine
                    ) -> tuple[str, RecordingEngine]:
    settings = Settings(database_url=database_url, redis_url=redis_url,
                        engine=EngineSettings(kind="sim", served_model_name="sim-model"))
    engine = engine_type(SimEngineConfig(speed=speed, eos_probability=0.0))
    await engine.start()
    redis = Redis.from_url(redis_url)
    deps = Dependencies(logging.getLogger("test"))
    runner = JobRunner(engine=engine, settings=settings, worker_id=WORKER,
                       sessionmaker=async_sessionmaker_for(database_url), redis=redis,
                       outbox=StreamOutbox(redis, ttl_s=60, state=deps.states[REDIS]),
                       deps=deps)
    engine.runner = runner  # for a test that acts as the runner's host meanwhile
    try:
        task = asyncio.create_task(runner.run(str(job_id), attempt, body=body, ahead=ahead))
        if meanwhile is not None:
            await meanwhile(engine)
        outcome = await task
        await asyncio.sleep(0.05)  # an abort is instant in the sim engine
        stats = engine.stats()
        assert stats.num_running + stats.num_waiting == 0, stats  # nothing left running
        return outcome, engine
    finally:
        await engine.shutdown()
        await redis.aclose()


def stream_entries(redis_url: str, job_id: uuid.UUID) -> int:
    return SyncRedis.from_url(redis_url).xlen(stream_key(job_id))


def test_the_engine_starts_before_the_claim_and_nothing_leaves_before_it(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    job_id = queued_claimed_job(database_url, tenant_id, max_tokens=4)
    locker = psycopg.connect(to_libpq_url(database_url))  # holds the row: the claim waits
    locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))

    async def meanwhile(engine: RecordingEngine) -> None:
        for _ in range(200):
            if engine.submitted:
                break
            await asyncio.sleep(0.01)
        assert engine.submitted == [f"{job_id}:1"]  # the engine has it, the claim waits
        await asyncio.sleep(0.2)  # the sim engine has long finished the request by now
        assert stream_entries(test_redis_url, job_id) == 0  # and nothing was delivered
        assert row(database_url, job_id).status == "assigned"
        await asyncio.to_thread(locker.commit)  # the claim goes through

    try:
        outcome, _ = asyncio.run(run_early(database_url, test_redis_url, job_id, 1,
                                           body_of(database_url, job_id),
                                           speed=float("inf"), meanwhile=meanwhile))
    finally:
        locker.close()
    assert outcome == "succeeded"
    job = row(database_url, job_id)
    assert (job.status, job.completion_tokens) == ("succeeded", 4)
    assert stream_entries(test_redis_url, job_id) == 5  # 4 deltas and the final entry


def test_a_failed_claim_aborts_the_engine_request_and_delivers_nothing(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    job_id = queued_claimed_job(database_url, tenant_id, max_tokens=400)
    body = body_of(database_url, job_id)
    # A stale hand-off: attempt 2 was never claimed, so the row refuses the worker's start.
    outcome, engine = asyncio.run(run_early(database_url, test_redis_url, job_id, 2, body,
                                            speed=1.0))
    assert outcome == "skipped" and engine.submitted == [f"{job_id}:2"]
    assert stream_entries(test_redis_url, job_id) == 0
    assert row(database_url, job_id).status == "assigned"  # untouched: attempt 1's to start


def test_a_body_the_row_contradicts_runs_as_the_row_says(
        database_url: str, test_redis_url: str, tenant_id: uuid.UUID) -> None:
    job_id = queued_claimed_job(database_url, tenant_id, max_tokens=24)
    body = body_of(database_url, job_id)  # what a dispatcher's older view would carry
    checkpoint = SimEngine(SimEngineConfig()).encode("so far")[1:]  # without the BOS token
    with sync_session(database_url) as session:
        session.execute(update(Job).where(Job.id == job_id).values(
            checkpoint_token_ids=checkpoint))
        session.commit()
    outcome, engine = asyncio.run(run_early(database_url, test_redis_url, job_id, 1, body,
                                            speed=float("inf")))
    assert outcome == "succeeded"
    assert engine.submitted == [f"{job_id}:1", f"{job_id}:1"]  # early, then from the row
    job = row(database_url, job_id)
    assert job.status == "succeeded" and job.result is not None
    assert job.result["text"].startswith("so far")  # continued after the checkpoint
    assert job.completion_tokens == 24  # the whole answer, its checkpoint included
