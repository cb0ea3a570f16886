"""Checkpoints of preempted jobs: the generated token ids go to Postgres, the job back to the
queue. A later attempt, on any worker, continues from prompt + those tokens ("swap out" by
recompute: with greedy decoding the continuation is token-identical to an uninterrupted run).
"""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.jobs.events import JOBS_CHANNEL
from service.jobs.models import Job, JobStatus


async def park_job(sessionmaker: async_sessionmaker[AsyncSession], *, job_id: uuid.UUID,
                   attempt: int, worker_id: str, generated_ids: list[int],
                   recomputed: int = 0) -> bool:
    """running -> queued with the full list of tokens generated so far; False if the job is
    no longer this attempt's (cancelled meanwhile, or its lease was lost)."""
    now = dt.datetime.now(dt.UTC)
    async with sessionmaker() as session:
        row = (await session.execute(
            update(Job)
            .where(Job.id == job_id, Job.attempt == attempt, Job.status == JobStatus.RUNNING,
                   Job.worker_id == worker_id)
            .values(status=JobStatus.QUEUED, worker_id=None, lease_expires_at=None,
                    queued_at=now, updated_at=now, preempted_at=now,
                    preemptions=Job.preemptions + 1, checkpoint_token_ids=generated_ids,
                    recomputed_tokens=Job.recomputed_tokens + recomputed)
            .returning(Job.id)
        )).first()
        if row is not None:
            # The dispatcher frees the victim's room and re-queues it as a resumable job.
            await session.execute(text("SELECT pg_notify(:c, :p)"), {
                "c": JOBS_CHANNEL, "p": f"requeue:{job_id}:{worker_id}:{len(generated_ids)}"})
        await session.commit()
    return row is not None

