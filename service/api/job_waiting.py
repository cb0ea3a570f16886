"""Waiting on a job from its HTTP request, shared by every route that answers with a job's
result (chat and text completions, responses): the wait itself, the errors a job's end
becomes, and cancelling the job when its client leaves.

The relay (service.api.relay.follow_job) follows the job's token stream, with the job row as
the fallback; the routes only shape the finished row.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request

from service.api.relay import ClientGone, Interrupted, NewText, Settled, follow_job
from service.jobs.service import cancel_job, job_outcome
from service.store.job_stream import Failure, Final
from service.store.models.jobs import Job
from service.store.settings import Settings
from service.web.errors import APIError

log = logging.getLogger("fairway.api")


async def wait_for_job(request: Request, job_id: uuid.UUID, settings: Settings,
                       obs: Any, on_settled: Callable[[], None] | None = None) -> Job:
    """The finished job's row; its failure as its HTTP error. A client that leaves, or a
    timeout, cancels the job (its engine slot is freed). ``on_settled``: called when the
    job's end says its worker settled the quota (``Admission.settled_by_worker``)."""
    state = request.app.state
    try:
        async for ev in follow_job(state.redis, job_id,
                                   timeout_s=settings.api.request_timeout_seconds,
                                   is_disconnected=request.is_disconnected,
                                   settled=row_reader(state, job_id),
                                   on_quota_settled=on_settled):
            if isinstance(ev, NewText):
                obs.first_token()
            elif isinstance(ev, Final):
                job = await final_row(state, job_id)
                obs.finished(ok=True, completion_tokens=job.completion_tokens or 0)
                return job
            elif isinstance(ev, Failure):
                obs.finished(ok=False)
                raise job_error(ev)
            elif isinstance(ev, Interrupted):  # the job goes on; its result stays fetchable
                obs.finished(ok=False)
                raise interrupted_error(ev, job_id)
            else:
                obs.finished(ok=False)
                await cancel_for_client(state, job_id)
                raise APIError(504, "The request timed out before the job finished.",
                               code="timeout")
    except ClientGone:
        await cancel_for_client(state, job_id)
        raise
    raise APIError(500, "The job's event stream ended unexpectedly.", code="internal_error")


async def final_row(state: Any, job_id: uuid.UUID) -> Job:
    async with state.sessionmaker() as session:
        job: Job | None = await session.get(Job, job_id)
    assert job is not None  # the worker writes the row before the final event
    return job


def row_reader(state: Any, job_id: uuid.UUID) -> Callable[[], Awaitable[Settled | None]]:
    """The relay's fallback: the job's end as its row says, when the stream does not say it."""
    async def read() -> Settled | None:
        async with state.sessionmaker() as session:
            job = await session.get(Job, job_id)
        return job_outcome(job) if job is not None else None
    return read


async def cancel_for_client(state: Any, job_id: uuid.UUID) -> None:
    try:
        async with state.sessionmaker() as session:
            if await cancel_job(session, state.redis, job_id=job_id):
                log.info("job cancelled: client disconnected", extra={"job_id": str(job_id)})
    except Exception:  # never let cleanup crash the server; the lease expiry is the backstop
        log.exception("cancelling job failed", extra={"job_id": str(job_id)})


def interrupted_error(ev: Interrupted, job_id: uuid.UUID) -> APIError:
    return APIError(503, f"{ev.reason} The request is still being processed: fetch its result "
                         f"with GET /v1/jobs/job_{job_id.hex}.", code="stream_interrupted",
                    headers={"Retry-After": "2"})


def job_error(failure: Failure) -> APIError:
    headers = ({"Retry-After": str(failure.retry_after)} if failure.retry_after is not None
               else None)
    return APIError(failure.status, failure.message, code=failure.code, param=failure.param,
                    headers=headers)
