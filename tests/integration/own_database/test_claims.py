"""Claims (worker.claims) against real Postgres: only the current attempt's delivery to the
worker the row names starts the job, and the claim reads back what the attempt continues from."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from typing import Any

from sqlalchemy import select, text

from service.store import job_queries, lifecycle
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.jobs import Job
from service.store.outages import Dependencies
from service.store.settings import EngineSettings, Settings
from worker.claims import Claims

WORKER = "claims-w"



def assigned_job(database_url: str, tenant_id: uuid.UUID,
                 events: list[dict[str, Any]] | None = None,
                 checkpoint: list[int] | None = None) -> uuid.UUID:
    """A job the dispatcher claimed for WORKER (attempt 1), not started yet."""
    with sync_session(database_url) as session:
        job = lifecycle.new_job(tenant_id=tenant_id, kind="batch", service_tier="default",
                                priority=3, endpoint="completions", model="sim-model",
                                request={"prompt": "p"}, stream=False, max_tokens=8,
                                events=events, checkpoint_token_ids=checkpoint)
        session.add(job)
        session.flush()
        session.execute(lifecycle.claim(job.id, worker_id=WORKER, lease_s=30,
                                        now=dt.datetime.now(dt.UTC)))
        session.commit()
        return job.id


def claims(database_url: str, worker_id: str = WORKER) -> Claims:
    settings = Settings(database_url=database_url,
                        engine=EngineSettings(kind="sim", served_model_name="sim-model"))
    return Claims(settings=settings, worker_id=worker_id,
                  sessionmaker=async_sessionmaker_for(database_url),
                  deps=Dependencies(logging.getLogger("test")))


def status(database_url: str, job_id: uuid.UUID) -> str:
    with sync_session(database_url) as session:
        return str(session.scalar(select(Job.status).where(Job.id == job_id)))


def test_the_current_attempt_on_its_worker_starts_the_job_once(database_url: str,
                                                               make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    job_id = assigned_job(database_url, tenant_id)

    async def main() -> list[Any]:
        return [await claims(database_url, "other-w").claim(job_id, 1),  # not its worker
                await claims(database_url).claim(job_id, 2),  # not its attempt
                await claims(database_url).claim(job_id, 1),
                await claims(database_url).claim(job_id, 1)]  # a duplicate delivery

    other_worker, stale, claimed, duplicate = asyncio.run(main())
    assert other_worker is None and stale is None and duplicate is None
    assert claimed is not None and claimed.job_id == job_id and claimed.attempt == 1
    assert (claimed.endpoint, claimed.max_tokens, claimed.priority) == ("completions", 8, 3)
    assert claimed.checkpoint == [] and claimed.resume_of is None
    assert claimed.streamed  # not a batch file's line: its tokens stream
    assert status(database_url, job_id) == "running"


def test_a_parked_job_resumes_from_its_checkpoint(database_url: str, make_tenant: Any) -> None:
    tenant_id, _ = make_tenant()
    parked = assigned_job(database_url, tenant_id, checkpoint=[4, 5, 6],
                          events=[lifecycle.job_event("preempted")])
    retried = assigned_job(database_url, tenant_id, checkpoint=[7])

    async def main() -> list[Any]:
        return [await claims(database_url).claim(parked, 1),
                await claims(database_url).claim(retried, 1)]

    after_park, after_loss = asyncio.run(main())
    assert after_park.checkpoint == [4, 5, 6] and after_park.resume_of == "preemption"
    assert after_loss.checkpoint == [7] and after_loss.resume_of == "retry"


def test_no_checkpoint_is_sql_null_which_the_dispatchers_read_takes(database_url: str,
                                                                   make_tenant: Any) -> None:
    """JSON null would be a scalar, and the dispatcher's read of queued jobs takes the
    checkpoint's array length: one such row stopped every dispatcher term."""
    tenant_id, _ = make_tenant()
    job_id = assigned_job(database_url, tenant_id, checkpoint=None)
    with sync_session(database_url) as session:
        session.execute(text("UPDATE jobs SET status = 'queued' WHERE id = :id"), {"id": job_id})
        assert session.scalar(select(Job.checkpoint_token_ids.is_(None)).where(
            Job.id == job_id)) is True
        queued = job_queries.fetch_queued(session, job_ids=[job_id])
        assert [job.generated_tokens for job in queued] == [0]
