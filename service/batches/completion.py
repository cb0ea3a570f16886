"""The batch status machine after validation: finalize, expire, finish a cancel (sync).

Called from the dispatcher's maintenance tick through service/batches/maintenance.py. Every
step locks the batch row `FOR UPDATE SKIP LOCKED` and re-checks its status, so a step that
two processes (an old and a new dispatcher leader) both attempt happens once, and a step
interrupted by a crash is simply found again on the next tick.

Quota: every step that ends a batch (completed, expired, cancelled) settles its reservation
(service/quotas/batch.py) under the row lock and before anything is written: the enqueued
tokens are released and the month corrected to the tokens its jobs really used. Settling
deletes the reservation, so a repeated or retried step settles nothing twice; a Redis outage
fails the step before the result files are written, and the next tick retries it.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from service.batches.ingest import validate_batch, validation_errors_key
from service.batches.results import EXPIRED, Assembled, assemble_results
from service.files.storage import FileStorage
from service.quotas.batch import settle_batch_sync
from service.store import batch_lifecycle as batches
from service.store import lifecycle as jobs
from service.store import wakeups
from service.store.batch_lifecycle import BatchEvent
from service.store.keys import control_channel
from service.store.models.batches import OPEN_STATUSES, Batch, BatchStatus
from service.store.models.jobs import Job, JobStatus
from service.store.quota_store import SyncQuotaStore
from service.store.settings import Settings

log = logging.getLogger("fairway.batches")
_ACTIVE = [s.value for s in JobStatus if s in jobs.ACTIVE]


@dataclass(frozen=True, slots=True)
class Due:
    batch_id: uuid.UUID
    action: str  # validate | expire | finalize | cancel


def find_due(session: Session, *, now: dt.datetime, validation_grace_s: float) -> list[Due]:
    """Open batches that need a step now. Cheap: the open-status index and one EXISTS each."""
    active = exists().where(Job.batch_id == Batch.id, Job.status.in_(_ACTIVE))
    rows = session.execute(
        select(Batch.id, Batch.status, Batch.expires_at, Batch.created_at, active.label("busy"))
        .where(Batch.status.in_([s.value for s in OPEN_STATUSES]))).all()
    session.rollback()
    stale = now - dt.timedelta(seconds=validation_grace_s)
    due = []
    for row in rows:
        if row.status == BatchStatus.VALIDATING and row.created_at < stale:
            due.append(Due(row.id, "validate"))
        elif row.status == BatchStatus.IN_PROGRESS and row.expires_at <= now:
            due.append(Due(row.id, "expire"))
        elif row.status in (BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING) and not row.busy:
            due.append(Due(row.id, "finalize"))
        elif row.status == BatchStatus.CANCELLING and not row.busy:
            due.append(Due(row.id, "cancel"))
    return due


def run_step(session: Session, *, due: Due, storage: FileStorage, settings: Settings,
             redis: Redis) -> str | None:
    """Carry out one step; returns the batch's new status, or None if nothing was done."""
    if due.action == "validate":
        return validate_batch(session, batch_id=due.batch_id, storage=storage, settings=settings,
                              redis=redis)
    if due.action == "expire":
        return expire_batch(session, batch_id=due.batch_id, storage=storage, redis=redis)
    if due.action == "cancel":
        return _close(session, due.batch_id, storage, BatchEvent.CANCELLED, redis)
    return finalize_batch(session, batch_id=due.batch_id, storage=storage, redis=redis)


def finalize_batch(session: Session, *, batch_id: uuid.UUID, storage: FileStorage,
                   redis: Redis) -> str | None:
    """in_progress -> finalizing (committed, so clients see it) -> completed with files."""
    now = dt.datetime.now(dt.UTC)
    moved = session.execute(batches.guarded(
        BatchEvent.FINALIZE, Batch.id == batch_id,
        ~exists().where(Job.batch_id == batch_id, Job.status.in_(_ACTIVE)), now=now)
        .returning(Batch.id)).first()
    session.commit()
    if moved is None and session.scalar(select(Batch.status).where(Batch.id == batch_id)) != (
            BatchStatus.FINALIZING):
        session.rollback()
        return None
    return _close(session, batch_id, storage, BatchEvent.COMPLETE, redis)


def expire_batch(session: Session, *, batch_id: uuid.UUID, storage: FileStorage,
                 redis: Redis) -> str | None:
    """Window over: unfinished lines become batch_expired errors, running ones are aborted."""
    batch = batches.lock(session, batch_id, BatchEvent.EXPIRE)
    if batch is None:
        return None
    now = dt.datetime.now(dt.UTC)
    stopped = session.execute(jobs.expire(batch_id, error={**EXPIRED, "status": 408},
                                          now=now)).all()
    placed = [r for r in stopped if r.worker_id]
    if placed:  # the dispatcher frees their slots, as for any cancelled job
        session.execute(*wakeups.notify_all(wakeups.JobCancelled(r.id) for r in placed))
    settle_quota(session, batch, redis)
    assembled = assemble_results(session, batch=batch, storage=storage)
    _apply(batch, assembled)
    batches.advance(batch, BatchEvent.EXPIRE, now)
    session.commit()
    for row in placed:  # after commit: the worker's final write then finds the row cancelled
        redis.publish(control_channel(row.worker_id),
                      wakeups.encode_command(wakeups.AbortJob(str(row.id), row.attempt)))
    storage.delete(validation_errors_key(batch_id))
    log.info("batch expired", extra={"batch_id": str(batch_id), "unfinished": len(stopped)})
    return BatchStatus.EXPIRED


def _close(session: Session, batch_id: uuid.UUID, storage: FileStorage, event: BatchEvent,
           redis: Redis) -> str | None:
    """finalizing -> completed or cancelling -> cancelled, with the output and error files."""
    batch = batches.lock(session, batch_id, event)
    if batch is None:
        return None
    settle_quota(session, batch, redis)
    _apply(batch, assemble_results(session, batch=batch, storage=storage))
    batches.advance(batch, event, dt.datetime.now(dt.UTC))
    session.commit()
    storage.delete(validation_errors_key(batch_id))  # now part of the error file
    log.info("batch closed", extra={"batch_id": str(batch_id), "status": batch.status})
    return batch.status


def settle_quota(session: Session, batch: Batch, redis: Redis) -> int | None:
    """Release the batch's quota reservation, correcting the month to its jobs' real tokens
    (prompt + completion of every line, as usage_daily counts them). Call with the batch row
    locked, before the commit that makes the batch final. Idempotent: None once settled."""
    used = session.scalar(
        select(func.coalesce(func.sum(func.coalesce(Job.prompt_tokens, 0)
                                      + func.coalesce(Job.completion_tokens, 0)), 0))
        .where(Job.batch_id == batch.id))
    reserved = settle_batch_sync(SyncQuotaStore(redis), tenant_id=batch.tenant_id,
                                 batch_id=batch.id, actual_tokens=int(used or 0))
    if reserved is not None:
        log.info("batch quota settled", extra={"batch_id": str(batch.id),
                                               "reserved": reserved, "used": int(used or 0)})
    return reserved


def _apply(batch: Batch, assembled: Assembled) -> None:
    batch.output_file_id, batch.error_file_id = assembled.output_file_id, assembled.error_file_id
    batch.final_counts, batch.usage = assembled.counts, assembled.usage
