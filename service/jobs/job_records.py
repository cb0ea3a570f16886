"""Job operations for the API (async). Scheduling is not decided here: the dispatcher does it."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import Float, bindparam, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.jobs.door_request import AdmittedSlo, Classification, DoorRequest
from service.jobs.express_handoff import Express, placed_wakeup
from service.store import lifecycle, tracing, wakeups
from service.store.adapter_names import is_ft_name
from service.store.job_stream import Failure, Final
from service.store.keys import control_channel
from service.store.models.batches import BATCH_PREFIX
from service.store.models.jobs import Job, JobStatus
from service.store.nul_codec import result_text
from service.store.response_events import record_response_end_async
from service.store.telemetry.logfmt import current_request_id

log = logging.getLogger("fairway.jobs")

# The columns the API's insert sets (the rest take their defaults), and the insert with its
# NOTIFY built once with bound parameters: building the INSERT and its cache key per request
# cost more than its round trip (service.store.lifecycle, "built once").
_CREATE_COLUMNS: tuple[str, ...] = (
    "id", "tenant_id", "api_key_id", "kind", "service_tier", "priority", "endpoint", "model",
    "request", "stream", "max_tokens", "deadline_at", "status", "attempt", "slo_plan",
    "ttft_slo_ms", "tpot_slo_ms", "predicted_ttft_ms", "request_id", "adapter_model")
_CREATED = insert(Job).values({key: lifecycle.column_param(key) for key in _CREATE_COLUMNS}
                               ).returning(Job.created_at, Job.seq).cte("created")
_CREATE_AND_NOTIFY = select(_CREATED.c.created_at, _CREATED.c.seq, wakeups.NOTIFY
                            ).select_from(_CREATED)
# The same for a job placed at insert with an express ticket (service.jobs.express_handoff):
# assigned and leased by the database's clock, as its ``created_at`` is.
_PLACE_COLUMNS: tuple[str, ...] = (*_CREATE_COLUMNS, "worker_id")
_PLACED = insert(Job).values({
    **{key: lifecycle.column_param(key) for key in _PLACE_COLUMNS},
    "assigned_at": func.now(),
    "lease_expires_at": func.now() + func.make_interval(
        0, 0, 0, 0, 0, 0, bindparam("p_lease_s", type_=Float())),
}).returning(Job.created_at, Job.seq).cte("placed")
_PLACE_AND_NOTIFY = select(_PLACED.c.created_at, _PLACED.c.seq, wakeups.NOTIFY
                           ).select_from(_PLACED)


async def create_job(session: AsyncSession, req: DoorRequest, *, job_id: uuid.UUID,
                     classification: Classification, express: Express | None = None,
                     slo: AdmittedSlo | None = None,
                     predicted_ttft_s: float | None = None) -> Job:
    """Insert the request's job and wake the dispatcher, committed before the caller answers.

    NOTIFY is transactional: the dispatcher hears of the job only once the row is visible.
    The row and its NOTIFY go in one statement (a data-modifying CTE), so the realtime path
    pays one round trip and its commit here, not an ORM flush, a NOTIFY and the commit. The
    returned job is not attached to ``session``; its ``created_at`` and ``seq`` are the
    database's. ``job_id``: the door's admission ticket, so the quota reservation is keyed by
    the job from the start. ``express``: the realtime job was placed on a worker by the door,
    its hand-off already sent (service.jobs.express_handoff): inserted assigned to that worker and
    leased. ``slo``: the plan and targets a realtime job was admitted under, kept on its row,
    with the door's ``predicted_ttft_s``.
    """
    tenant_id = req.tenant.id
    fields: dict[str, Any] = dict(
        id=job_id,
        tenant_id=tenant_id,
        kind=classification.kind,
        service_tier=classification.service_tier,
        priority=classification.priority,
        endpoint=req.endpoint,
        model=req.model,
        adapter_model=adapter_named(req),
        request=req.stored,
        stream=req.stream,
        max_tokens=req.max_tokens,
        deadline_at=classification.deadline_at,
        api_key_id=req.api_key_id,
        slo_plan=slo and slo.plan,
        ttft_slo_ms=slo and slo.ttft_slo_ms,
        tpot_slo_ms=slo and slo.tpot_slo_ms,
        predicted_ttft_ms=None if predicted_ttft_s is None else round(predicted_ttft_s * 1000),
        request_id=current_request_id(),
    )
    if express is None:
        job = lifecycle.new_job(**fields)
        row = await _insert(session, _CREATE_AND_NOTIFY, lambda: _params(
            job, _CREATE_COLUMNS, wakeups.JobQueued(job.id, tracing.traceparent())), job.id)
    else:
        job = lifecycle.placed_job(worker_id=express.ticket.worker_id, **fields)
        placed, lease = express, {"p_lease_s": express.lease_s}
        row = await _insert(session, _PLACE_AND_NOTIFY, lambda: _params(
            job, _PLACE_COLUMNS, placed_wakeup(job, placed)) | lease, job.id)
    job.created_at, job.seq = row.created_at, row.seq
    # Links the request (its request_id is on the line, from the log context) to the job id
    # that every later line about the job carries, in the dispatcher and the worker too.
    log.info("job created", extra={"job_id": str(job.id), "tenant_id": str(tenant_id),
                                   "kind": classification.kind,
                                   "placed_on": express.ticket.worker_id if express else None})
    return job


def adapter_named(req: DoorRequest) -> str | None:
    """The adapter's ft: name when the request named one (the route resolved it to its base
    model, ``req.model``), for usage by model (service.usage.completions)."""
    named = req.payload.get("model")
    return named if isinstance(named, str) and is_ft_name(named) else None


async def _insert(session: AsyncSession, statement: Any,
                  params: Callable[[], dict[str, Any]], job_id: uuid.UUID) -> Any:
    """``params`` are made inside the insert's span: its NOTIFY carries that span's context.
    The span names the job by the id users are shown."""
    # The dispatcher's hops continue this span.
    with tracing.span("fairway.api.insert", attributes={"fairway.job": f"job_{job_id.hex}"}):
        # On the session's Core connection: the ORM's execute path (its compile state and
        # result loading) cost ~0.3 ms a job more for a statement that loads no entity.
        conn = await session.connection()
        row = (await conn.execute(statement, params())).one()
        await session.commit()
    return row


def _params(job: Job, columns: tuple[str, ...], wakeup: wakeups.Wakeup) -> dict[str, Any]:
    return {f"p_{key}": getattr(job, key) for key in columns} | wakeups.notify_params(wakeup)


async def get_job(session: AsyncSession, *, job_id: uuid.UUID, tenant_id: uuid.UUID) -> Job | None:
    """A tenant sees only its own jobs; anyone else's look like they don't exist."""
    return await session.scalar(
        select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id)
    )


async def cancel_job(session: AsyncSession, redis: Redis, *, job_id: uuid.UUID) -> bool:
    """Cancel an active job; if a worker holds it, tell that worker to abort it at once."""
    now = dt.datetime.now(dt.UTC)
    row = (await session.execute(lifecycle.cancel(Job.id == job_id, now=now))).first()
    if row is None:
        await session.rollback()
        return False
    await session.execute(*wakeups.notify(wakeups.JobCancelled(job_id)))
    await record_response_end_async(session, row)
    await session.commit()
    if row.worker_id:
        await redis.publish(control_channel(row.worker_id), wakeups.encode_command(
            wakeups.AbortJob(str(job_id), row.attempt)))
    return True


def job_outcome(job: Job) -> tuple[str, Final | Failure] | None:
    """A final job's whole text and its end, as the last entry of its stream says it; None
    while the job is active. The relay falls back on this when that entry does not come."""
    if job.status == JobStatus.SUCCEEDED:
        return result_text(job.result), Final(job.attempt, job.finish_reason,
                                              job.prompt_tokens or 0, job.completion_tokens or 0)
    if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
        error = job.error or {}
        cancelled = job.status == JobStatus.CANCELLED
        return "", Failure(job.attempt, int(error.get("status") or (409 if cancelled else 500)),
                           error.get("code") or ("cancelled" if cancelled else "job_failed"),
                           error.get("message") or f"The job {job.status}.",
                           retry_after=error.get("retry_after"), param=error.get("param"))
    return None


def parse_public_id(value: str) -> uuid.UUID | None:
    """Accept job_<hex>, chatcmpl-<hex>, cmpl-<hex>, resp_<hex> or a bare UUID."""
    for prefix in ("job_", "chatcmpl-", "cmpl-", "resp_"):
        if value.startswith(prefix):
            value = value[len(prefix):]
            break
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def job_public_view(job: Job) -> dict[str, Any]:
    def ts(value: dt.datetime | None) -> int | None:
        return int(value.timestamp()) if value else None

    usage = None
    if job.prompt_tokens is not None:
        completion = job.completion_tokens or 0
        usage = {"prompt_tokens": job.prompt_tokens, "completion_tokens": completion,
                 "total_tokens": job.prompt_tokens + completion}
    return {
        "id": job.public_id,
        "object": "job",
        "kind": job.kind,
        "status": job.status,
        "endpoint": job.endpoint,
        "model": job.model,
        "service_tier": job.service_tier,
        "priority": job.priority,
        "batch_id": BATCH_PREFIX + job.batch_id.hex if job.batch_id else None,
        "custom_id": job.custom_id,
        "attempt": job.attempt,
        "finish_reason": job.finish_reason,
        # The answer, once the job succeeded: a client whose stream broke fetches it here.
        "output": {"text": result_text(job.result)} if job.status == "succeeded" else None,
        "usage": usage,
        "error": job.error,
        "deadline_at": ts(job.deadline_at),
        "created_at": ts(job.created_at),
        "queued_at": ts(job.queued_at),
        "assigned_at": ts(job.assigned_at),
        "started_at": ts(job.started_at),
        "first_token_at": ts(job.first_token_at),
        "finished_at": ts(job.finished_at),
        "cancelled_at": ts(job.cancelled_at),
        # Preemption record (docs/preemption.md): how often the job was taken back, the
        # prefill its resumes paid again, and the time it spent parked in the queue.
        "preemption": {
            "preemptions": job.preemptions or 0,
            "recomputed_tokens": job.recomputed_tokens or 0,
            "parked_seconds": round(float(job.parked_seconds or 0.0), 3),
        },
        "events": list(job.events or []),
    }
