"""Batch operations for the API (async). Validation and finalization run elsewhere
(ingest.py in a thread, completion.py from the dispatcher's maintenance)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import defaultdict
from typing import Any

from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError
from sqlalchemy import func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from service.batches.results import CANCELLED
from service.batches.schemas import BatchCreate
from service.files.file_records import get_file
from service.store import batch_lifecycle as batches
from service.store import lifecycle, wakeups
from service.store.batch_lifecycle import BatchEvent
from service.store.keys import control_channel
from service.store.models.batches import Batch, BatchStatus
from service.store.models.files import parse_file_id
from service.store.models.jobs import Job, JobStatus
from service.store.pg_deadline import waiting_for_locks
from service.web.errors import APIError

log = logging.getLogger("fairway.batches")

# Cancelling waits for a validating batch's row lock (the whole validation: ~10 s for a 200 MB
# file), longer than the API's usual deadline on a Postgres round trip.
VALIDATION_LOCK_WAIT_S = 60.0


async def create_batch(session: AsyncSession, *, tenant_id: uuid.UUID, body: BatchCreate,
                       window: dt.timedelta) -> Batch:
    file_id = parse_file_id(body.input_file_id)
    source = await get_file(session, file_id=file_id, tenant_id=tenant_id) if file_id else None
    if source is None:
        raise APIError(404, f"No such File object: {body.input_file_id}", code="not_found",
                       param="input_file_id")
    if source.purpose != "batch":
        raise APIError(400, "The input file must have purpose 'batch'.", code="invalid_value",
                       param="input_file_id")
    now = dt.datetime.now(dt.UTC)
    batch = batches.new_batch(
        now=now, tenant_id=tenant_id, endpoint=body.endpoint, input_file_id=source.id,
        completion_window=body.completion_window, batch_metadata=body.metadata,
        expires_at=now + window, total=0, invalid_lines=0)
    session.add(batch)
    await session.commit()
    return batch


async def get_batch(session: AsyncSession, *, batch_id: uuid.UUID,
                    tenant_id: uuid.UUID) -> Batch | None:
    """Another tenant's batch looks exactly like a missing one."""
    return await session.scalar(select(Batch).where(Batch.id == batch_id,
                                                    Batch.tenant_id == tenant_id))


async def list_batches(session: AsyncSession, *, tenant_id: uuid.UUID,
                       after: uuid.UUID | None, limit: int) -> tuple[list[Batch], bool]:
    """Newest first; `after` is the last id of the previous page."""
    query = select(Batch).where(Batch.tenant_id == tenant_id)
    if after is not None:
        anchor = await get_batch(session, batch_id=after, tenant_id=tenant_id)
        if anchor is not None:
            query = query.where(tuple_(Batch.created_at, Batch.id) <
                                tuple_(anchor.created_at, anchor.id))
    rows = list((await session.scalars(
        query.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit + 1))).all())
    return rows[:limit], len(rows) > limit


async def cancel_batch(session: AsyncSession, *, batch: Batch,
                       redis: AsyncRedis | None = None) -> Batch:
    """Every unfinished line stops now: queued ones at once, assigned and running ones are
    aborted on their workers (``redis``: after the commit, as the jobs cancel does; without
    it they end at their lease), so `cancelling` lasts until those workers stand down, not
    until the lines finish. Lines already finished keep their results.

    If the batch is being validated, this waits for the validator's row lock: the batch then
    is in_progress with all its jobs, and the same statements cancel it.
    """
    now = dt.datetime.now(dt.UTC)
    with waiting_for_locks(VALIDATION_LOCK_WAIT_S):
        moved = await session.scalar(batches.guarded(BatchEvent.CANCEL, Batch.id == batch.id,
                                                     now=now).returning(Batch.id))
    if moved is None:
        await session.rollback()
        await session.refresh(batch)
        if batch.status in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
            return batch
        raise APIError(409, f"Cannot cancel a batch with status '{batch.status}'.",
                       code="invalid_state")
    stopped = (await session.execute(lifecycle.cancel(
        Job.batch_id == batch.id, now=now, error={**CANCELLED, "status": 499}))).all()
    placed = [row for row in stopped if row.worker_id]
    if placed:  # the dispatcher frees their room, as for any cancelled job
        await session.execute(*wakeups.notify_all(wakeups.JobCancelled(r.id) for r in placed))
    await session.commit()
    if redis is not None and placed:
        try:
            for row in placed:  # the worker's final write then finds the row cancelled
                await redis.publish(control_channel(row.worker_id), wakeups.encode_command(
                    wakeups.AbortJob(str(row.id), row.attempt)))
        except RedisError:  # their leases are the backstop
            log.warning("batch cancel: could not tell the workers",
                        extra={"batch_id": batch.public_id})
    await session.refresh(batch)
    return batch


async def cancel_tenant_batches(session: AsyncSession, *, tenant_id: uuid.UUID
                                ) -> list[uuid.UUID]:
    """The cancel above for every open (validating or in_progress) batch of a tenant, e.g. when
    it is suspended. Does not commit: the caller's transaction (and its audit entry) does.
    Like cancel_batch, a batch being validated is waited for (the validator's row lock)."""
    now = dt.datetime.now(dt.UTC)
    with waiting_for_locks(VALIDATION_LOCK_WAIT_S):
        ids = list((await session.scalars(
            batches.guarded(BatchEvent.CANCEL, Batch.tenant_id == tenant_id, now=now)
            .returning(Batch.id))).all())
    if ids:
        await _cancel_queued_lines(session, ids, now)
    return ids


async def _cancel_queued_lines(session: AsyncSession, batch_ids: list[uuid.UUID],
                               now: dt.datetime) -> None:
    """Queued lines stop now; the dispatcher drops them when it tries to place them."""
    await session.execute(lifecycle.cancel(Job.batch_id.in_(batch_ids), now=now,
                                           error={**CANCELLED, "status": 499}, only_queued=True))


async def live_counts(session: AsyncSession, batches: list[Batch]) -> dict[uuid.UUID, dict[str,
                                                                                        int]]:
    """request_counts for open batches, from their jobs (index on batch_id, status)."""
    counts: dict[uuid.UUID, dict[str, int]] = {}
    open_ids = [b.id for b in batches if b.final_counts is None]
    by_batch: dict[uuid.UUID, dict[str, int]] = defaultdict(dict)
    if open_ids:
        rows = await session.execute(
            select(Job.batch_id, Job.status, func.count()).where(Job.batch_id.in_(open_ids))
            .group_by(Job.batch_id, Job.status))
        for batch_id, status, n in rows:
            if batch_id is not None:  # always, by the query; the column is nullable
                by_batch[batch_id][status] = n
    for b in batches:
        if b.final_counts is not None:
            counts[b.id] = dict(b.final_counts)
            continue
        jobs = by_batch[b.id]
        # An open batch's cancelled lines were cancelled (the batch, or one line by its
        # owner), never expired (expiry freezes the counts): they did not fail.
        counts[b.id] = {"total": b.total, "completed": jobs.get(JobStatus.SUCCEEDED, 0),
                        "failed": jobs.get(JobStatus.FAILED, 0) + b.invalid_lines,
                        "cancelled": jobs.get(JobStatus.CANCELLED, 0)}
    return counts


def batch_view(batch: Batch, counts: dict[str, int]) -> dict[str, Any]:
    def ts(value: dt.datetime | None) -> int | None:
        return int(value.timestamp()) if value else None

    def fid(value: uuid.UUID | None) -> str | None:
        return f"file-{value.hex}" if value else None

    return {
        "id": batch.public_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "model": batch.model,
        "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        "input_file_id": fid(batch.input_file_id),
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": fid(batch.output_file_id),
        "error_file_id": fid(batch.error_file_id),
        "created_at": ts(batch.created_at),
        "in_progress_at": ts(batch.in_progress_at),
        "expires_at": ts(batch.expires_at),
        "finalizing_at": ts(batch.finalizing_at),
        "completed_at": ts(batch.completed_at),
        "failed_at": ts(batch.failed_at),
        "expired_at": ts(batch.expired_at),
        "cancelling_at": ts(batch.cancelling_at),
        "cancelled_at": ts(batch.cancelled_at),
        "request_counts": counts,
        "metadata": batch.batch_metadata,
        "usage": batch.usage,
    }
