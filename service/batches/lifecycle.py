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
import json
import logging
import uuid
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import exists, func, select, text, update
from sqlalchemy.orm import Session

from service.batches.ingest import validate_batch, validation_errors_key
from service.batches.models import OPEN_STATUSES, Batch, BatchStatus
from service.batches.results import EXPIRED, Assembled, assemble_results
from service.files.storage import FileStorage
from service.jobs.events import JOBS_CHANNEL, control_channel
from service.jobs.models import ACTIVE_STATUSES, Job, JobStatus
from service.quotas.batch import settle_batch_sync
from service.quotas.store import SyncQuotaStore
from service.settings import Settings

log = logging.getLogger("fairway.batches")
_ACTIVE = [s.value for s in ACTIVE_STATUSES]


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
        return _close(session, due.batch_id, storage, BatchStatus.CANCELLING,
                      BatchStatus.CANCELLED, redis)
    return finalize_batch(session, batch_id=due.batch_id, storage=storage, redis=redis)


def finalize_batch(session: Session, *, batch_id: uuid.UUID, storage: FileStorage,
                   redis: Redis) -> str | None:
    """in_progress -> finalizing (committed, so clients see it) -> completed with files."""
    now = dt.datetime.now(dt.UTC)
    moved = session.execute(
        update(Batch).where(Batch.id == batch_id, Batch.status == BatchStatus.IN_PROGRESS,
                            ~exists().where(Job.batch_id == batch_id, Job.status.in_(_ACTIVE)))
        .values(status=BatchStatus.FINALIZING, finalizing_at=now).returning(Batch.id)).first()
    session.commit()
    if moved is None and session.scalar(select(Batch.status).where(Batch.id == batch_id)) != (
            BatchStatus.FINALIZING):
        session.rollback()
        return None
    return _close(session, batch_id, storage, BatchStatus.FINALIZING, BatchStatus.COMPLETED,
                  redis)


def expire_batch(session: Session, *, batch_id: uuid.UUID, storage: FileStorage,
                 redis: Redis) -> str | None:
    """Window over: unfinished lines become batch_expired errors, running ones are aborted."""
    batch = _lock(session, batch_id, BatchStatus.IN_PROGRESS)
    if batch is None:
        return None
    now = dt.datetime.now(dt.UTC)
    stopped = session.execute(
        update(Job).where(Job.batch_id == batch_id, Job.status.in_(_ACTIVE))
        .values(status=JobStatus.CANCELLED, cancelled_at=now, finished_at=now, updated_at=now,
                lease_expires_at=None, error={**EXPIRED, "status": 408})
        .returning(Job.id, Job.worker_id, Job.attempt)).all()
    placed = [r for r in stopped if r.worker_id]
    for row in placed:  # the dispatcher frees their slots, as for any cancelled job
        session.execute(text("SELECT pg_notify(:c, :p)"),
                        {"c": JOBS_CHANNEL, "p": f"cancel:{row.id}"})
    settle_quota(session, batch, redis)
    assembled = assemble_results(session, batch=batch, storage=storage)
    _apply(batch, assembled)
    batch.status, batch.expired_at = BatchStatus.EXPIRED, now
    session.commit()
    for row in placed:  # after commit: the worker's final write then finds the row cancelled
        redis.publish(control_channel(row.worker_id), json.dumps(
            {"op": "abort", "job_id": str(row.id), "attempt": row.attempt}))
    storage.delete(validation_errors_key(batch_id))
    log.info("batch expired", extra={"batch_id": str(batch_id), "unfinished": len(stopped)})
    return BatchStatus.EXPIRED


def _close(session: Session, batch_id: uuid.UUID, storage: FileStorage, from_status: str,
           to_status: BatchStatus, redis: Redis) -> str | None:
    batch = _lock(session, batch_id, from_status)
    if batch is None:
        return None
    settle_quota(session, batch, redis)
    _apply(batch, assemble_results(session, batch=batch, storage=storage))
    now = dt.datetime.now(dt.UTC)
    batch.status = to_status
    if to_status == BatchStatus.COMPLETED:
        batch.completed_at = now
    else:
        batch.cancelled_at = now
    session.commit()
    storage.delete(validation_errors_key(batch_id))  # now part of the error file
    log.info("batch closed", extra={"batch_id": str(batch_id), "status": to_status.value})
    return to_status


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


def _lock(session: Session, batch_id: uuid.UUID, status: str) -> Batch | None:
    batch = session.scalar(select(Batch).where(Batch.id == batch_id, Batch.status == status)
                           .with_for_update(skip_locked=True))
    if batch is None:
        session.rollback()
    return batch


def _apply(batch: Batch, assembled: Assembled) -> None:
    batch.output_file_id, batch.error_file_id = assembled.output_file_id, assembled.error_file_id
    batch.final_counts, batch.usage = assembled.counts, assembled.usage
