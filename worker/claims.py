"""A worker's claims of the attempts delivered to it: the row's assigned -> running for the
current attempt to this worker (lifecycle.START), read back as a ``ClaimedJob``. A stale or
duplicate delivery claims nothing. ``JobRunner`` (runner.py) holds one ``Claims``."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import Row, Select, String, literal_column, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store import lifecycle
from service.store.db import without_transaction
from service.store.models.jobs import Job
from service.store.outages import Dependencies, through_outages
from service.store.settings import Settings
from service.store.telemetry.logfmt import bind_job
from worker.claim_ahead import claim_when_committed
from worker.claimed_job import ClaimedJob
from worker.engine_request import tenant_cache_salt
from worker.metrics import observe_job
from worker.structured import resume_checkpoint

log = logging.getLogger("fairway.worker")
T = TypeVar("T")


# What the claim returns for metrics (worker.metrics) and the log context.
OBSERVED_COLUMNS = (Job.created_at, Job.assigned_at, Job.first_token_at, Job.kind,
                    Job.service_tier, Job.tenant_id, Job.model, Job.batch_id, Job.deadline_at)


# The type of the job's latest event (``events -> -1 ->> 'type'``): "preempted" means this
# claim resumes a parked job. The claim does not touch events, so RETURNING sees the old list.
_LAST_EVENT_TYPE = Job.events.op("->", return_type=JSONB)(literal_column("-1")).op(
    "->>", return_type=String)(literal_column("'type'"))


# The claim: lifecycle.START (built once, service.store.lifecycle), RETURNING what the attempt
# needs.
_CLAIM = lifecycle.START.returning(
    Job.endpoint, Job.request, Job.max_tokens, Job.priority, Job.checkpoint_token_ids,
    Job.preempted_at, _LAST_EVENT_TYPE.label("last_event"), *OBSERVED_COLUMNS)
# Whether a job's row is there at all (worker.claim_ahead), built once.
_EXISTS: Select[Any] = select(literal_column("1")).where(Job.id == lifecycle.P_JOB_ID)


class Claims:
    """Claims for ``worker_id``, each patient through a Postgres outage up to the lease."""

    def __init__(self, *, settings: Settings, worker_id: str,
                 sessionmaker: async_sessionmaker[AsyncSession], deps: Dependencies) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.sessionmaker = sessionmaker
        self.deps = deps

    async def claim(self, job_id: uuid.UUID, attempt: int, ahead: bool = False,
                    since: dt.datetime | None = None) -> ClaimedJob | None:
        """Only the delivery for the current attempt, sent to this worker, may start the job.
        ``ahead``: sent alongside its row's insert, so the claim waits for the row
        (worker.claim_ahead). ``since``: when its first token left, if before this claim (an
        express job): the attempt started no later than that."""
        now = dt.datetime.now(dt.UTC)

        async def start() -> Row[Any] | None:
            nonlocal now
            now = dt.datetime.now(dt.UTC)  # a claim that waited for its row starts later
            if since is not None:
                now = min(now, since)
            # One statement, committed by itself (autocommit): no transaction stays open
            # across an await, so a worker frozen mid-claim holds no row lock for the
            # dispatcher to wait on, and the claim costs one round trip, not three.
            async with self.sessionmaker() as session:
                await without_transaction(session)
                conn = await session.connection()
                return (await conn.execute(_CLAIM.statement, _CLAIM.params(
                    job_id, attempt=attempt, worker_id=self.worker_id,
                    lease_s=self.settings.jobs.lease_seconds, now=now))).first()

        # Through a Postgres outage no longer than the lease: after that the job is re-queued.
        def patient(call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
            return through_outages(call, self.deps,
                                   give_up_after_s=self.settings.jobs.lease_seconds)

        row = await patient(start)
        if row is None and ahead:
            row = await claim_when_committed(lambda: patient(start), lambda: patient(
                lambda: self._row_exists(job_id)))
        if row is None:
            return None
        bind_job(job_id=job_id, tenant=row.tenant_id, job_class=row.kind, attempt=attempt)
        log.info("job started", extra={"worker_id": self.worker_id})
        checkpoint = list(row.checkpoint_token_ids or [])
        resume_of = ("preemption" if row.last_event == "preempted"
                     else "retry" if checkpoint else None)
        checkpoint = resume_checkpoint(row.request, checkpoint)  # none for structured jobs
        return ClaimedJob(job_id, attempt, row.endpoint, row.request, row.max_tokens,
                          row.priority, checkpoint, observe_job(row, attempt=attempt, now=now),
                          streamed=row.batch_id is None, resume_of=resume_of,
                          cache_salt=tenant_cache_salt(self.settings, row.tenant_id),
                          tenant_id=row.tenant_id,
                          created_at=row.created_at)

    async def _row_exists(self, job_id: uuid.UUID) -> bool:
        async with self.sessionmaker() as session:
            return await session.scalar(_EXISTS, {"p_job_id": job_id}) is not None
