"""RowStamps (worker.stamps) against real Postgres: the first-token time and the "resumed"
event land on the running row of the attempt that made them, and nowhere else; a deferred
first-token stamp lands only while the job still runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from typing import Any

from sqlalchemy import select

from service.store import lifecycle
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.jobs import Job
from service.store.outages import Dependencies
from service.store.settings import EngineSettings, JobSettings, Settings
from worker.claimed_job import ClaimedJob
from worker.engine.base import EngineRequest, SamplingSpec
from worker.engine.sim import SimEngine
from worker.stamps import RowStamps

WORKER = "stamps-w"



def running_job(database_url: str, tenant_id: uuid.UUID) -> uuid.UUID:
    """A job claimed and started by WORKER, attempt 1, with one event already recorded."""
    now = dt.datetime.now(dt.UTC)
    with sync_session(database_url) as session:
        job = lifecycle.new_job(tenant_id=tenant_id, kind="realtime", service_tier="default",
                                priority=0, endpoint="completions", model="sim-model",
                                request={"prompt": "p"}, stream=False, max_tokens=8,
                                events=[lifecycle.job_event("earlier")])
        session.add(job)
        session.flush()
        session.execute(lifecycle.claim(job.id, worker_id=WORKER, lease_s=30, now=now))
        start = lifecycle.START
        session.connection().execute(start.statement, start.params(
            job.id, attempt=1, worker_id=WORKER, lease_s=30, now=now))
        session.commit()
        return job.id


def row(database_url: str, job_id: uuid.UUID) -> Job:
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(Job.id == job_id))
        assert job is not None
        return job


def stamps(database_url: str, *, stamp_s: float = 0.0, worker_id: str = WORKER) -> RowStamps:
    settings = Settings(database_url=database_url,
                        engine=EngineSettings(kind="sim", served_model_name="sim-model"),
                        jobs=JobSettings(first_token_stamp_seconds=stamp_s))
    return RowStamps(settings=settings, engine=SimEngine(), worker_id=worker_id,
                     sessionmaker=async_sessionmaker_for(database_url),
                     deps=Dependencies(logging.getLogger("test")))


def held(job_id: uuid.UUID, attempt: int = 1, **fields: Any) -> ClaimedJob:
    return ClaimedJob(job_id, attempt, "completions", {"prompt": "p"}, 8, 0, [], **fields)


FIRST_TOKEN = dt.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)


def test_the_first_token_lands_on_its_attempts_running_row(database_url: str,
                                                            make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    job_id, other_id = running_job(database_url, tenant_id), running_job(database_url, tenant_id)
    job = held(job_id, first_token_at=FIRST_TOKEN)
    asyncio.run(stamps(database_url).mark_first_token(job))
    assert row(database_url, job_id).first_token_at == FIRST_TOKEN
    assert row(database_url, other_id).first_token_at is None
    assert row(database_url, job_id).status == "running"  # a stamp moves nothing


def test_a_stale_attempt_stamps_nothing(database_url: str, make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    job_id = running_job(database_url, tenant_id)
    stale = held(job_id, attempt=2, first_token_at=FIRST_TOKEN, resume_of="preemption")
    before = row(database_url, job_id)

    async def main() -> None:
        await stamps(database_url).mark_first_token(stale)
        request = EngineRequest("r", [1, 2, 3], SamplingSpec(max_tokens=4))
        await stamps(database_url).mark_resumed(stale, request, 2)
        # The right attempt on another worker's row is not this worker's to stamp.
        await stamps(database_url, worker_id="other-w").mark_resumed(
            held(job_id, resume_of="preemption"), request, 2)

    asyncio.run(main())
    after = row(database_url, job_id)
    assert after.first_token_at is None and after.events == before.events


def test_the_resumed_event_is_appended_to_the_rows_events(database_url: str,
                                                          make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    job_id = running_job(database_url, tenant_id)
    job = held(job_id, resume_of="preemption")
    job.checkpoint = [5, 6]
    request = EngineRequest("r", list(range(20)), SamplingSpec(max_tokens=4))
    asyncio.run(stamps(database_url).mark_resumed(job, request, 16))
    events = row(database_url, job_id).events
    assert [e["type"] for e in events] == ["earlier", "resumed"]
    resumed = events[-1]
    assert resumed["worker"] == WORKER and resumed["attempt"] == 1
    assert resumed["after"] == "preemption" and resumed["checkpoint_tokens"] == 2
    assert (resumed["prefill_tokens"], resumed["cached_tokens"],
            resumed["recomputed_tokens"]) == (20, 16, 4)
    assert job.resume_logged


def test_a_deferred_stamp_lands_later_and_not_on_a_job_that_ended(database_url: str,
                                                                  make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    still_running, ended = running_job(database_url, tenant_id), running_job(database_url,
                                                                            tenant_id)

    async def main() -> None:
        rs = stamps(database_url, stamp_s=0.2)
        jobs = [held(still_running, first_token_at=FIRST_TOKEN),
                held(ended, first_token_at=FIRST_TOKEN)]
        for job in jobs:
            await rs.mark_first_token(job)
        assert await asyncio.to_thread(lambda: row(database_url, still_running).first_token_at
                                       ) is None  # not yet
        with sync_session(database_url) as session:  # the end write, without the stamp
            assert session.execute(lifecycle.end(
                ended, attempt=1, worker_id=WORKER, succeeded=True,
                values={"completion_tokens": 1}, now=dt.datetime.now(dt.UTC))).first()
            session.commit()
        await asyncio.gather(*(job.stamp for job in jobs if job.stamp is not None))

    asyncio.run(main())
    assert row(database_url, still_running).first_token_at == FIRST_TOKEN
    assert row(database_url, ended).first_token_at is None
    assert row(database_url, ended).status == "succeeded"
