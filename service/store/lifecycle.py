"""The job lifecycle: every change of a job row's status, and the one place that writes them.

The allowed transitions are the table ``TRANSITIONS`` (docs/jobs.md draws the same table, and a
test holds the two together). Each function below builds one guarded statement (those of
the realtime path, ``START`` and ``CLAIM_MANY``, are built once: "built once" below),
``UPDATE jobs SET status = <to> ... WHERE id = ... AND status IN (<from>)``, plus, for the
actors that hold a job (a worker's attempt), ``AND attempt = ... AND worker_id = ...``. A
stale or duplicate actor's write therefore matches no row and changes nothing; its caller sees
no returned row and stands down. Statements are plain SQLAlchemy, so the API and the workers
(async sessions) and the dispatcher (sync) execute them alike; the caller commits, together
with the wake-up (service.store.wakeups) the change calls for.

    event        from                         to          actor
    create       -                            queued      API insert, batch ingest (COPY)
    claim        queued                       assigned    dispatcher (attempt+1, lease)
    start        assigned                     running     worker, for its attempt
    first_token  running                      running     worker (stamps first_token_at, only
                                                          if the job is still running a while
                                                          after it; else park/end carry it)
    resume       running                      running     worker (records the resume)
    renew        running                      running     worker heartbeat (lease)
    checkpoint   running                      running     worker heartbeat (tokens so far)
    park         running                      queued      worker, preempted (checkpoint)
    finish       running                      succeeded   worker
    fail         running                      failed      worker
    requeue      assigned | running           queued      dispatcher: lease expired, worker
                                                          dead, task unsent
    reject       queued                       failed      dispatcher, policy refused; API,
                                                          no worker in the waiting room
    cancel       queued | assigned | running  cancelled   API, admin, batch cancel
    expire       queued | assigned | running  cancelled   batch window over
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    DateTime,
    Integer,
    String,
    Update,
    Uuid,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import BindParameter

from service.store.models.jobs import Job, JobStatus
from service.store.usage import CURRENT_XID

Q, A, R = JobStatus.QUEUED, JobStatus.ASSIGNED, JobStatus.RUNNING
ACTIVE = frozenset({Q, A, R})

# A value in a statement: a Python value, or a bound parameter of a statement built once.
Value = Any
P = ParamSpec("P")


class JobEvent(enum.StrEnum):
    CREATE = "create"
    PLACE = "place"
    CLAIM = "claim"
    START = "start"
    FIRST_TOKEN = "first_token"
    RESUME = "resume"
    RENEW = "renew"
    CHECKPOINT = "checkpoint"
    PARK = "park"
    FINISH = "finish"
    FAIL = "fail"
    REQUEUE = "requeue"
    REJECT = "reject"
    CANCEL = "cancel"
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True)
class Transition:
    sources: frozenset[JobStatus]  # empty: the row does not exist yet
    target: JobStatus

    @property
    def moves(self) -> bool:
        return self.target not in self.sources


TRANSITIONS: Mapping[JobEvent, Transition] = {
    JobEvent.CREATE: Transition(frozenset(), Q),
    JobEvent.PLACE: Transition(frozenset(), A),
    JobEvent.CLAIM: Transition(frozenset({Q}), A),
    JobEvent.START: Transition(frozenset({A}), R),
    JobEvent.FIRST_TOKEN: Transition(frozenset({R}), R),
    JobEvent.RESUME: Transition(frozenset({R}), R),
    JobEvent.RENEW: Transition(frozenset({R}), R),
    JobEvent.CHECKPOINT: Transition(frozenset({R}), R),
    JobEvent.PARK: Transition(frozenset({R}), Q),
    JobEvent.FINISH: Transition(frozenset({R}), JobStatus.SUCCEEDED),
    JobEvent.FAIL: Transition(frozenset({R}), JobStatus.FAILED),
    JobEvent.REQUEUE: Transition(frozenset({A, R}), Q),
    JobEvent.REJECT: Transition(frozenset({Q}), JobStatus.FAILED),
    JobEvent.CANCEL: Transition(ACTIVE, JobStatus.CANCELLED),
    JobEvent.EXPIRE: Transition(ACTIVE, JobStatus.CANCELLED),
}

# Every (from, to) pair some event allows; a status change outside it is a bug.
ALLOWED_MOVES: frozenset[tuple[JobStatus, JobStatus]] = frozenset(
    (source, t.target) for t in TRANSITIONS.values() for source in t.sources)


# What a write that can end a job RETURNs beside its own columns, so that the caller records a
# background response's webhook event in the same transaction (service.store.response_events).
ENDED = (Job.tenant_id.label("tenant_id"), Job.endpoint, Job.status, Job.finish_reason,
         Job.started_at, Job.request["background"].as_boolean().label("background"))


def guarded(event: JobEvent, *where: ColumnElement[bool], now: Value,
            values: Mapping[str, Any] | None = None,
            sources: Iterable[JobStatus] | None = None) -> Update:
    """``UPDATE jobs SET <event's target>, <values> WHERE status IN <sources> AND <where>``.
    ``sources`` narrows the table's (e.g. cancel only what is still queued), never widens it."""
    rule = TRANSITIONS[event]
    allowed = rule.sources if sources is None else frozenset(sources)
    if not allowed or not allowed <= rule.sources:
        raise ValueError(f"{event}: {sorted(allowed)} is not within {sorted(rule.sources)}")
    changes: dict[str, Any] = dict(values or {})
    if rule.moves:  # updated_at follows status changes, not stamps on a running job
        changes |= {"status": rule.target, "updated_at": now}
    return update(Job).where(status_in(allowed), *where).values(**changes)


def status_in(statuses: Iterable[str]) -> ColumnElement[bool]:
    """``jobs.status IN (...)`` with one bound value per status, for statements built once:
    an expanding IN list is re-rendered at every execution (SQLAlchemy's post-compile step),
    ~2% of a worker's CPU on the realtime path."""
    return Job.status.in_([literal(s, Job.status.type) for s in sorted(statuses)])


def owned_by(job_id: Value, attempt: Value, worker_id: Value) -> tuple[ColumnElement[bool], ...]:
    """The row is still this worker's attempt (not re-leased, re-claimed or taken back)."""
    return Job.id == job_id, Job.attempt == attempt, Job.worker_id == worker_id


# -- built once --------------------------------------------------------------------------------
# The writes made for every realtime job are built once, at import, with bound parameters, and
# executed with each call's values: building an UPDATE and its cache key cost SQLAlchemy
# ~0.4 ms, more than the statement's round trip to Postgres. Each is one ``Prepared`` (its
# statement and the function that gives its values); worker.end_write and the API's insert
# build theirs from the same parameters (``owner_params``, ``column_param``).
P_JOB_ID = bindparam("p_job_id", type_=Uuid())
P_ATTEMPT = bindparam("p_attempt", type_=Integer())
P_WORKER_ID = bindparam("p_worker_id", type_=String())
P_NOW = bindparam("p_now", type_=DateTime(timezone=True))
_LEASE_UNTIL = bindparam("p_lease_until", type_=DateTime(timezone=True))


@dataclass(frozen=True, slots=True)
class Prepared(Generic[P]):
    """A statement built once, and the function that gives its values for one call's
    arguments: ``conn.execute(X.statement, X.params(...))``."""

    statement: Update
    params: Callable[P, dict[str, Any]]

    def returning(self, *columns: ColumnElement[Any] | QueryableAttribute[Any]
                  ) -> Prepared[P]:
        """The same statement RETURNING ``columns`` too (built once as well), same values."""
        return Prepared(self.statement.returning(*columns), self.params)


def column_param(key: str) -> BindParameter[Any]:
    """The bound parameter ``p_<key>``, typed as the ``jobs`` column ``key``."""
    return bindparam(f"p_{key}", type_=Job.__table__.c[key].type)


def owner_params(job_id: uuid.UUID, *, attempt: int, worker_id: str,
                 now: dt.datetime) -> dict[str, Any]:
    """The values of P_JOB_ID, P_ATTEMPT, P_WORKER_ID and P_NOW."""
    return {"p_job_id": job_id, "p_attempt": attempt, "p_worker_id": worker_id, "p_now": now}


# -- create ------------------------------------------------------------------------------------
def new_job(**fields: Any) -> Job:
    """A queued job for the API to add (its NOTIFY goes in the same transaction)."""
    return Job(**fields, status=TRANSITIONS[JobEvent.CREATE].target, attempt=0)


def placed_job(*, worker_id: str, **fields: Any) -> Job:
    """A realtime job the API places at insert with an express ticket (docs/jobs.md, "The
    express path"): created assigned to ``worker_id``, first attempt. Its insert leases it as
    a claim would (``assigned_at``, ``lease_expires_at``), so a hand-off that never arrives
    re-runs it at the lease's end."""
    return Job(**fields, status=TRANSITIONS[JobEvent.PLACE].target, attempt=1,
               worker_id=worker_id)


# Batch lines arrive by COPY (service.batches.ingest): the columns, and each row's status part.
COPY_COLUMNS = ("id", "tenant_id", "kind", "service_tier", "priority", "endpoint", "model",
                "request", "stream", "max_tokens", "deadline_at", "status", "attempt",
                "batch_id", "custom_id", "line_no")
NEW_STATUS, NEW_ATTEMPT = TRANSITIONS[JobEvent.CREATE].target.value, 0


# -- the dispatcher ----------------------------------------------------------------------------
def claim(job_id: uuid.UUID, *, worker_id: str, lease_s: float, now: dt.datetime) -> Update:
    """queued -> assigned, attempt+1, with a lease. RETURNING the new attempt."""
    return guarded(JobEvent.CLAIM, Job.id == job_id, now=now, values={
        "attempt": Job.attempt + 1, "worker_id": worker_id, "assigned_at": now,
        "lease_expires_at": now + dt.timedelta(seconds=lease_s)}).returning(Job.attempt)


def _claim_many_params(placements: Iterable[tuple[uuid.UUID, str]], *, lease_s: float,
                       now: dt.datetime) -> dict[str, Any]:
    pairs = list(placements)
    if not pairs:
        raise ValueError("CLAIM_MANY: no placements")
    return {"p_job_ids": [p[0] for p in pairs], "p_worker_ids": [p[1] for p in pairs],
            "p_now": now, "p_lease_until": now + dt.timedelta(seconds=lease_s)}


# ``claim`` for several jobs in one statement (``params(placements, lease_s=, now=)``): each
# (job, worker) pair queued -> assigned to its worker, attempt+1, with a lease. A job no
# longer queued is left out. RETURNING (id, attempt, worker_id) for each job claimed.
# unnest(ids, workers): one statement text whatever the count (bound as two arrays).
_PLACED = func.unnest(bindparam("p_job_ids", type_=ARRAY(Uuid())),
                      bindparam("p_worker_ids", type_=ARRAY(String()))).table_valued(
    "job_id", "worker_id").render_derived(name="placed")
CLAIM_MANY = Prepared(guarded(JobEvent.CLAIM, Job.id == _PLACED.c.job_id, now=P_NOW, values={
    "attempt": Job.attempt + 1, "worker_id": _PLACED.c.worker_id, "assigned_at": P_NOW,
    "lease_expires_at": _LEASE_UNTIL}).returning(Job.id, Job.attempt, Job.worker_id),
    _claim_many_params)


def requeue_expired(now: dt.datetime) -> Update:
    """Jobs whose worker stopped renewing go back to the queue (the next claim bumps attempt).
    Rows another dispatcher is handling are skipped. RETURNING (id, the lost worker)."""
    rule = TRANSITIONS[JobEvent.REQUEUE]
    lost = (select(Job.id, Job.worker_id)
            .where(status_in(rule.sources), Job.lease_expires_at < now)
            .with_for_update(skip_locked=True).cte("lost"))
    return (guarded(JobEvent.REQUEUE, Job.id == lost.c.id, now=now, values={
        "queued_at": now, "lease_expires_at": None, "worker_id": None})
        .returning(Job.id, lost.c.worker_id))


def requeue_worker(worker_id: str, now: dt.datetime) -> Update:
    """Every job of a worker that stopped heartbeating goes back to the queue now, without
    waiting for the leases: the next attempt continues from the job's last checkpoint. A worker
    that was only slow finds its writes refused (its attempt no longer owns the job).

    Rows locked are skipped, not waited for: a worker frozen (SIGSTOP, a stalled VM) inside a
    write holds its row's lock until it runs again, and waiting for it stopped the whole
    dispatcher that long. A skipped row goes back with its lease (``requeue_expired``, which
    skips locked rows too) once the lock is let go."""
    rule = TRANSITIONS[JobEvent.REQUEUE]
    gone = (select(Job.id).where(Job.worker_id == worker_id, status_in(rule.sources))
            .with_for_update(skip_locked=True).cte("gone"))
    return guarded(JobEvent.REQUEUE, Job.id == gone.c.id, now=now, values={
        "queued_at": now, "lease_expires_at": None, "worker_id": None}).returning(Job.id)


def unclaim(job_id: uuid.UUID, *, attempt: int, worker_id: str, now: dt.datetime) -> Update:
    """assigned -> queued at once: the claim's task could not be sent (the broker is away), so
    the job goes back without waiting for its lease to run out. RETURNING the id."""
    return guarded(JobEvent.REQUEUE, *owned_by(job_id, attempt, worker_id), now=now,
                   sources={A}, values={"queued_at": now, "lease_expires_at": None,
                                        "worker_id": None}).returning(Job.id)


def reject(job_id: uuid.UUID, *, error: dict[str, Any], now: dt.datetime) -> Update:
    """queued -> failed: the policy refused the job (e.g. its SLO cannot be met)."""
    return guarded(JobEvent.REJECT, Job.id == job_id, now=now,
                   values={"finished_at": now, "error": error}).returning(Job.id, *ENDED)


# -- a worker's attempt ------------------------------------------------------------------------
def _start_params(job_id: uuid.UUID, *, attempt: int, worker_id: str, lease_s: float,
                  now: dt.datetime) -> dict[str, Any]:
    return owner_params(job_id, attempt=attempt, worker_id=worker_id, now=now) | {
        "p_lease_until": now + dt.timedelta(seconds=lease_s)}


# assigned -> running, for the delivery of the current attempt to the worker named in the row
# only (``params``: the job, attempt, worker, lease and now). A parked job's time in the queue
# is added to ``parked_seconds``. Never started before the row's creation: an express job's
# worker starts it from a hand-off sent alongside the insert (service.jobs.express_handoff), so its
# start may precede the row's clock.
START = Prepared(guarded(
    JobEvent.START, *owned_by(P_JOB_ID, P_ATTEMPT, P_WORKER_ID), now=P_NOW, values={
        "started_at": func.greatest(P_NOW, Job.created_at), "lease_expires_at": _LEASE_UNTIL,
        "preempted_at": None,
        "parked_seconds": Job.parked_seconds + func.coalesce(
            func.extract("epoch", P_NOW - Job.preempted_at), 0)}), _start_params)


def first_token(job_id: uuid.UUID, *, attempt: int, now: dt.datetime) -> Update:
    return guarded(JobEvent.FIRST_TOKEN, Job.id == job_id, Job.attempt == attempt, now=now,
                   values={"first_token_at": now})


def record_resume(job_id: uuid.UUID, *, attempt: int, worker_id: str, event: dict[str, Any],
                  now: dt.datetime) -> Update:
    return guarded(JobEvent.RESUME, *owned_by(job_id, attempt, worker_id), now=now,
                   values={"events": append_events(event)})


def renew(job_ids: list[uuid.UUID], *, worker_id: str, lease_s: float,
          now: dt.datetime) -> Update:
    """A live worker keeps the jobs it is running; only those (not ones merely assigned)."""
    return guarded(JobEvent.RENEW, Job.worker_id == worker_id, Job.id.in_(job_ids), now=now,
                   values={"lease_expires_at": now + dt.timedelta(seconds=lease_s)}
                   ).returning(Job.id)


def checkpoint(job_id: uuid.UUID, *, attempt: int, worker_id: str, generated_ids: list[int],
               now: dt.datetime) -> Update:
    """The tokens generated so far, kept while the job runs: if its worker dies, the next
    attempt continues from here instead of from the first token."""
    return guarded(JobEvent.CHECKPOINT, *owned_by(job_id, attempt, worker_id), now=now,
                   values={"checkpoint_token_ids": generated_ids})


def park(job_id: uuid.UUID, *, attempt: int, worker_id: str, generated_ids: list[int],
         recomputed: int, events: list[dict[str, Any]], now: dt.datetime,
         first_token_at: dt.datetime | None = None) -> Update:
    """running -> queued with every token generated so far (the checkpoint a later attempt
    continues from). ``first_token_at``: the attempt's first token, if its own stamp may not
    have been written yet. RETURNING the id: none if the attempt no longer owns the job."""
    values: dict[str, Any] = {
        "worker_id": None, "lease_expires_at": None, "queued_at": now, "preempted_at": now,
        "preemptions": Job.preemptions + 1, "checkpoint_token_ids": generated_ids,
        "recomputed_tokens": Job.recomputed_tokens + recomputed}
    if first_token_at is not None:
        values["first_token_at"] = first_token_at
    if events:
        values["events"] = append_events(*events)
    return guarded(JobEvent.PARK, *owned_by(job_id, attempt, worker_id), now=now,
                   values=values).returning(Job.id)


def end(job_id: Value, *, attempt: Value, worker_id: Value, succeeded: bool,
        values: Mapping[str, Any], now: Value) -> Update:
    """running -> succeeded | failed: the attempt's final write, only while it owns the job
    (``values`` carries ``first_token_at`` when the attempt's own stamp may not have been
    written: a short job's first token costs no write of its own). RETURNING what usage
    accounting needs."""
    event = JobEvent.FINISH if succeeded else JobEvent.FAIL
    # usage_xid: the usage roll-up counts this job once, from this row (service.store.usage).
    return guarded(event, *owned_by(job_id, attempt, worker_id), now=now, values={
        "finished_at": now, "lease_expires_at": None, "usage_xid": CURRENT_XID,
        **values}).returning(
        Job.id, Job.model, Job.kind, *ENDED)


# -- cancellation ------------------------------------------------------------------------------
def cancel(*where: ColumnElement[bool], now: dt.datetime, error: dict[str, Any] | None = None,
           only_queued: bool = False) -> Update:
    """active -> cancelled for the rows ``where`` picks (one job, a batch's lines, a tenant's
    queued requests). ``only_queued``: leave running work to finish. RETURNING (id, worker_id,
    attempt), so the caller can tell the dispatcher and abort running attempts."""
    values: dict[str, Any] = {"cancelled_at": now, "finished_at": now, "lease_expires_at": None}
    if error is not None:
        values["error"] = error
    return guarded(JobEvent.CANCEL, *where, now=now, values=values,
                   sources={Q} if only_queued else None).returning(
        Job.id, Job.worker_id, Job.attempt, *ENDED)


def expire(batch_id: uuid.UUID, *, error: dict[str, Any], now: dt.datetime) -> Update:
    """A batch's window is over: its unfinished lines end (running ones are aborted by the
    caller after commit). RETURNING (id, worker_id, attempt)."""
    return guarded(JobEvent.EXPIRE, Job.batch_id == batch_id, now=now, values={
        "cancelled_at": now, "finished_at": now, "lease_expires_at": None,
        "error": error}).returning(Job.id, Job.worker_id, Job.attempt)


# -- the job's event record ----------------------------------------------------------------------
def job_event(type_: str, **fields: Any) -> dict[str, Any]:
    """One entry of a job's events: {"at": ISO timestamp, "type": ..., ...}."""
    return {"at": dt.datetime.now(dt.UTC).isoformat(), "type": type_, **fields}


def append_events(*events: dict[str, Any]) -> ColumnElement[Any]:
    """``COALESCE(events, '[]'::jsonb) || CAST(:new AS jsonb)``: for an UPDATE's SET, so the
    append happens atomically in the database, whatever else touches the row."""
    new = cast(literal(json.dumps(list(events)), String), JSONB)
    return func.coalesce(Job.events, literal_column("'[]'::jsonb")).op("||")(new)
