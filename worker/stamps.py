"""What a job's runner writes on its row while the job runs, beside its claim and its end:
the events of a preemption and a resume, and the first-token time (deferred, so that a short
job's end write carries it). ``JobRunner`` (runner.py) holds one ``RowStamps``. Each stamp is
worth one try, never a wait (``_stamp``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import Update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store import lifecycle
from service.store.lifecycle import job_event
from service.store.outages import Dependencies, is_outage
from service.store.settings import Settings
from worker.checkpoint import preemption_mode
from worker.engine.base import Engine, EngineRequest

if TYPE_CHECKING:
    from worker.claimed_job import ClaimedJob

log = logging.getLogger("fairway.worker")


class RowStamps:
    """A worker's stamps on the rows of the attempts it runs (``worker_id``'s)."""

    def __init__(self, *, settings: Settings, engine: Engine, worker_id: str,
                 sessionmaker: async_sessionmaker[AsyncSession], deps: Dependencies) -> None:
        self.settings = settings
        self.engine = engine  # whether it can honour "swap" preemption
        self.worker_id = worker_id
        self.sessionmaker = sessionmaker
        self.deps = deps  # told of a Postgres outage a stamp ran into

    def preempted_event(self, job: ClaimedJob, checkpoint: int, new: int) -> dict[str, Any]:
        """What this preemption did with the job: tokens checkpointed, and the mode used (the
        engine decides whether "swap" can be honoured; if not, why it fell back)."""
        mode = preemption_mode(self.settings.engine.preemption_mode, self.engine)
        kv = ("kept in this worker's CPU memory; a resume here reloads it"
              if mode.used == "swap" else "dropped")
        return job_event("preempted", worker=self.worker_id, attempt=job.attempt,
                         checkpoint_tokens=checkpoint, new_tokens=new, kv=kv,
                         **mode.event_fields())

    def resumed_event(self, job: ClaimedJob, request: EngineRequest,
                       cached: int) -> dict[str, Any]:
        prefill = len(request.prompt_token_ids)
        return job_event("resumed", worker=self.worker_id, attempt=job.attempt,
                         after=job.resume_of, checkpoint_tokens=len(job.checkpoint),
                         prefill_tokens=prefill, cached_tokens=min(cached, prefill),
                         recomputed_tokens=max(0, prefill - cached))

    async def mark_resumed(self, job: ClaimedJob, request: EngineRequest, cached: int) -> None:
        """Append the "resumed" event, once the resume's prefill is done (cached count known)."""
        job.resume_logged = True
        await self._stamp(lifecycle.record_resume(
            job.job_id, attempt=job.attempt, worker_id=self.worker_id,
            event=self.resumed_event(job, request, cached), now=dt.datetime.now(dt.UTC)))

    async def mark_first_token(self, job: ClaimedJob) -> None:
        """Write the first token's time (``job.first_token_at``, noted by the runner as the
        token left) to the row only if the job is still running ``first_token_stamp_seconds``
        later. A job that ends (or parks) sooner carries the time in that write instead, so a
        short job's first token costs no transaction; a long one's running row shows it within
        that delay (the live views, GET /v1/jobs/{id})."""
        assert job.first_token_at is not None
        delay = self.settings.jobs.first_token_stamp_seconds
        if delay <= 0:
            await self._write_first_token(job)
        else:
            job.stamp = asyncio.create_task(self._first_token_later(job, delay))

    async def _first_token_later(self, job: ClaimedJob, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            await self._write_first_token(job)
        except Exception:  # a background stamp: say so, never take the job down
            log.exception("first-token stamp failed", extra={"job_id": str(job.job_id)})

    async def _write_first_token(self, job: ClaimedJob) -> None:
        assert job.first_token_at is not None
        job.stamp_writing = True  # from here on, let it finish (it is harmless if late)
        await self._stamp(lifecycle.first_token(job.job_id, attempt=job.attempt,
                                                now=job.first_token_at))

    async def _stamp(self, stmt: Update) -> None:
        """A stamp on a running job (first token, resume) is worth one try, never a wait: in a
        Postgres outage it is skipped and the tokens keep flowing."""
        try:
            async with self.sessionmaker() as session:
                await session.execute(stmt)
                await session.commit()
        except Exception as exc:
            if not is_outage(exc):
                raise
            self.deps.failed(exc)
