"""The dispatcher's reads and writes of jobs (sync): queued work for the policy, claims, lost
leases and rejections (the status changes themselves are service.store.lifecycle's)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, Row, Uuid, any_, bindparam, case, func, select
from sqlalchemy.orm import Session

from service.store import lifecycle
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.models.plans import QUEUE, Plan
from service.store.models.tenants import Tenant
from service.store.response_events import record_response_end
from service.store.wakeups import PlacedView


@dataclass(slots=True)
class QueuedJob:
    """A queued job with what the policy needs; built from one row."""

    job_id: uuid.UUID
    seq: int
    tenant_id: uuid.UUID
    tenant_weight: float
    kind: str
    priority: int
    model: str
    created_at: dt.datetime
    deadline_at: dt.datetime | None
    max_tokens: int
    prompt_tokens_estimate: int
    prefix_key: str | None
    generated_tokens: int  # checkpointed output of a preempted job
    prefix_tokens: int = 0  # the shared prefix's length (estimate), what a cache hit saves
    ttft_target_s: float | None = None  # the tenant's plan's TTFT target (realtime)
    attempt: int = 0  # > 0: it was placed before (a lost worker, an unclaim, a preemption)
    endpoint: str = ""
    request: dict[str, Any] | None = None  # as stored: what a realtime hand-off may carry
    # Its plan queues realtime: the longest predicted wait it is admitted with (None: the
    # plan sheds by the TTFT target; service.store.models.plans).
    max_wait_s: float | None = None


_QUEUED_COLUMNS = (Job.id, Job.seq, Job.tenant_id, Tenant.weight, Job.kind, Job.priority,
                   Job.model, Job.created_at, Job.deadline_at, Job.max_tokens, Job.request,
                   func.coalesce(func.jsonb_array_length(Job.checkpoint_token_ids), 0)
                   .label("generated"), Plan.ttft_slo_ms, Job.attempt, Job.endpoint,
                   case((Plan.admission_mode == QUEUE, Plan.max_queue_wait_ms))
                   .label("max_wait_ms"))


def prompt_estimate(request: dict[str, Any]) -> int:
    """A request's prompt tokens, roughly (~4 characters a token), as the door reserves them
    and the policy sizes the job; the engine's real counts correct it later."""
    messages = request.get("messages")
    return max(1, len(json.dumps(messages if messages is not None
                                 else request.get("prompt", ""))) // 4)


def prompt_shape(request: dict[str, Any]) -> tuple[int, str | None, int]:
    """A stored request's prompt estimate (``prompt_estimate``), and its shared prefix (a
    leading system or developer message): its key and length, or (None, 0)."""
    messages = request.get("messages")
    prefix_key, prefix_tokens = None, 0
    if messages and len(messages) > 1 and messages[0].get("role") in ("system", "developer"):
        prefix = json.dumps(messages[0])
        prefix_key = hashlib.sha1(prefix.encode()).hexdigest()[:16]
        prefix_tokens = len(prefix) // 4  # the same ~4 characters a token as the prompt
    return prompt_estimate(request), prefix_key, prefix_tokens


def _to_queued(row: Row[Any]) -> QueuedJob:
    estimate, prefix_key, prefix_tokens = prompt_shape(row.request)
    return QueuedJob(row.id, row.seq, row.tenant_id, row.weight, row.kind, row.priority,
                     row.model, row.created_at, row.deadline_at, row.max_tokens,
                     estimate, prefix_key, row.generated, prefix_tokens,
                     row.ttft_slo_ms / 1000 if row.ttft_slo_ms else None, row.attempt,
                     row.endpoint, row.request,
                     row.max_wait_ms / 1000 if row.max_wait_ms is not None else None)


def placed_queued(job_id: uuid.UUID, view: PlacedView) -> QueuedJob:
    """The policy's view of a placed job from its NOTIFY (service.store.wakeups.PlacedView),
    as ``fetch_placed`` would read it: no seq and no body (a placed job is not handed out
    again unless it is queued again, and then it is read)."""
    def at(epoch: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(epoch, dt.UTC)

    return QueuedJob(job_id, 0, view.tenant_id, view.tenant_weight, JobKind.REALTIME,
                     view.priority, view.model, at(view.arrival),
                     None if view.deadline is None else at(view.deadline), view.max_tokens,
                     view.prompt_estimate, view.prefix_key, 0, view.prefix_tokens,
                     view.ttft_target_s, view.attempt, max_wait_s=view.max_wait_s)


_JOBS = (select(*_QUEUED_COLUMNS).join(Tenant, Tenant.id == Job.tenant_id)
         .outerjoin(Plan, Plan.name == Tenant.plan).order_by(Job.seq))
_QUEUED = _JOBS.where(Job.status == JobStatus.QUEUED)
_BY_ID = Job.id == any_(bindparam("p_job_ids", type_=ARRAY(Uuid())))
# The read of every new job's NOTIFY, built once (service.store.lifecycle, "built once").
_QUEUED_BY_ID = _QUEUED.where(_BY_ID)
# The read of jobs the API placed with express tickets: still on their worker (a job that
# ended or was cancelled before this read holds no room any more).
_PLACED_BY_ID = _JOBS.where(_BY_ID, lifecycle.status_in([JobStatus.ASSIGNED,
                                                               JobStatus.RUNNING]))


def fetch_queued(session: Session, *, job_ids: Iterable[uuid.UUID] | None = None,
                 limit: int = 10_000) -> list[QueuedJob]:
    # The dispatcher's reads and writes below run on the session's Core connection: the
    # ORM's execute path (compile state, bulk-update synchronization, row loading) cost
    # 0.4-1.1 ms more a call here for statements that load no entity.
    conn = session.connection()
    if job_ids is not None:
        rows = conn.execute(_QUEUED_BY_ID, {"p_job_ids": list(job_ids)})
    else:
        rows = conn.execute(_QUEUED.limit(limit))
    return [_to_queued(r) for r in rows]


def fetch_placed(session: Session, *, job_ids: Iterable[uuid.UUID]) -> list[QueuedJob]:
    """The policy's view of jobs the API placed at insert (service.jobs.express_handoff) that
    are still assigned or running, read from their rows: what a placed job's NOTIFY carries
    instead (``placed_queued``), and what the tests hold that NOTIFY to."""
    return [_to_queued(r) for r in session.connection().execute(
        _PLACED_BY_ID, {"p_job_ids": list(job_ids)})]


def claim_jobs(session: Session, *, placements: list[tuple[uuid.UUID, str]],
               lease_s: float) -> dict[uuid.UUID, int]:
    """Several (job, worker) claims in one statement and one commit: job -> its new attempt,
    for those still queued (a job cancelled or claimed meanwhile is left out)."""
    if not placements:
        return {}
    claim = lifecycle.CLAIM_MANY
    rows = session.connection().execute(claim.statement, claim.params(
        placements, lease_s=lease_s, now=dt.datetime.now(dt.UTC))).all()
    session.commit()
    return {r.id: r.attempt for r in rows}


def requeue_worker_jobs(session: Session, *, worker_id: str) -> list[uuid.UUID]:
    """Jobs of a worker that missed its heartbeats, back to the queue."""
    ids = list(session.scalars(lifecycle.requeue_worker(worker_id, dt.datetime.now(dt.UTC))))
    session.commit()
    return ids


def unclaim_job(session: Session, *, job_id: uuid.UUID, attempt: int, worker_id: str) -> bool:
    """assigned -> queued, for a claim whose task could not be sent."""
    done = session.scalar(lifecycle.unclaim(job_id, attempt=attempt, worker_id=worker_id,
                                            now=dt.datetime.now(dt.UTC)))
    session.commit()
    return done is not None


def requeue_expired_leases(session: Session) -> list[tuple[uuid.UUID, str | None]]:
    """Jobs whose worker stopped renewing go back to the queue; the next claim bumps attempt."""
    rows = session.connection().execute(lifecycle.requeue_expired(dt.datetime.now(dt.UTC))
                                        ).all()
    session.commit()
    return [(r[0], r[1]) for r in rows]


def active_assignments(session: Session) -> list[tuple[uuid.UUID, str, str]]:
    rows = session.execute(
        select(Job.id, Job.worker_id, Job.kind)
        .where(Job.status.in_([JobStatus.ASSIGNED, JobStatus.RUNNING]),
               Job.worker_id.is_not(None)))
    return [(r.id, r.worker_id, r.kind) for r in rows]


def reject_job(session: Session, *, job_id: uuid.UUID, status: int, code: str,
               message: str) -> bool:
    done = session.execute(lifecycle.reject(
        job_id, error={"code": code, "message": message, "status": status},
        now=dt.datetime.now(dt.UTC))).first()
    if done is not None:
        record_response_end(session, done)
    session.commit()
    return done is not None
