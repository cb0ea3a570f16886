"""A tenant cancels one of its jobs (POST /v1/jobs/{id}/cancel, POST /v1/responses/{id}/cancel).

The same steps as every other cancel (docs/jobs.md): one guarded ``cancel`` transition with the
dispatcher's ``cancel:<id>`` NOTIFY in its commit; after the commit, the worker that runs the
job is told to abort it (its engine frees the slot within a step, and its final write then
finds the row cancelled and stands down), a request still waiting on the job ends at once
(its stream gets the final error entry), and the job's quota reservation is settled.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.jobs.job_records import get_job
from service.store import job_stream, lifecycle, nul_codec, wakeups
from service.store.job_queries import prompt_estimate
from service.store.keys import control_channel, stream_key
from service.store.models.jobs import Job
from service.store.quota_store import QuotaStore
from service.store.response_events import record_response_end_async
from service.web.errors import APIError

log = logging.getLogger("fairway.jobs")

# What a job cancelled by its owner ends with: its row's error, and its stream's last entry.
CANCELLED = job_stream.Failure(0, 409, "cancelled", "The job was cancelled by request.")
CANCELLED_ERROR = {"code": CANCELLED.code, "status": CANCELLED.status,
                   "message": CANCELLED.message}


async def cancel_own_job(session: AsyncSession, redis: Redis, *, tenant_id: uuid.UUID,
                         job_id: uuid.UUID, public_id: str, stream_ttl_s: int) -> Job:
    """Cancel the tenant's job (queued, parked, assigned or running) and return its row.

    404 when the tenant has no such job, 409 when the job has already ended."""
    now = dt.datetime.now(dt.UTC)
    row = (await session.execute(lifecycle.cancel(
        Job.id == job_id, Job.tenant_id == tenant_id, now=now, error=CANCELLED_ERROR))).first()
    if row is None:
        await session.rollback()
        job = await get_job(session, job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise APIError(404, f"No job with id '{public_id}'.", code="not_found")
        raise APIError(409, f"The job has already ended with status '{job.status}'; only "
                            "queued or running jobs can be cancelled.", code="invalid_state")
    await session.execute(*wakeups.notify(wakeups.JobCancelled(job_id)))
    await record_response_end_async(session, row)
    await session.commit()
    try:
        await _after_commit(redis, row.worker_id, row.attempt, job_id, stream_ttl_s)
    except RedisError:  # the lease and the relay's row check are the backstops
        log.warning("cancel: could not reach Redis after the commit",
                    extra={"job_id": str(job_id)})
    # Read back as the database has it now, not as this session may still hold it.
    job = await session.scalar(select(Job).where(Job.id == job_id)
                               .execution_options(populate_existing=True))
    assert job is not None  # cancelled rows are kept
    await _settle_quota(redis, job)
    return job


async def _after_commit(redis: Redis, worker_id: str | None, attempt: int,
                        job_id: uuid.UUID, stream_ttl_s: int) -> None:
    if worker_id:
        await redis.publish(control_channel(worker_id), wakeups.encode_command(
            wakeups.AbortJob(str(job_id), attempt)))
    key = stream_key(job_id)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xadd(key, job_stream.fields(CANCELLED))
        pipe.expire(key, stream_ttl_s)
        await pipe.execute()


async def _settle_quota(redis: Redis, job: Job) -> None:
    """An aborted attempt settles nothing, so settle here as a request that ends without its
    job does: the prompt estimate is charged, the rest of the reservation given back. A
    batch line has no reservation of its own (its batch's is settled when the batch closes),
    nor has a job whose request already settled: then this does nothing."""
    if job.batch_id is not None:
        return
    try:
        await QuotaStore(redis).settle(
            tenant_id=job.tenant_id, ref=job.id,
            actual_tokens=prompt_estimate(nul_codec.decode(job.request)))
    except RedisError:  # the reservation's TTL is the backstop
        log.warning("cancel: quota settle failed", extra={"job_id": str(job.id)})
