"""The job lifecycle against real Postgres: random sequences of every actor's event, with stale
and duplicate deliveries, never move a job outside the transition table, and a stale actor's
write changes nothing."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Update, select
from sqlalchemy.orm import Session

from service.store import lifecycle
from service.store.lifecycle import ALLOWED_MOVES, TRANSITIONS, JobEvent
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.models.tenants import Tenant

WORKERS = ("w1", "w2")
WORKER_EVENTS = {JobEvent.START, JobEvent.FIRST_TOKEN, JobEvent.RESUME, JobEvent.RENEW,
                 JobEvent.CHECKPOINT, JobEvent.PARK, JobEvent.FINISH, JobEvent.FAIL}


@dataclass(frozen=True)
class Step:
    event: JobEvent
    worker: str  # the actor's worker id (claim: the worker chosen)
    attempt_offset: int  # the actor's attempt relative to the row's: 0 current, else stale
    narrow: bool = False  # cancel: only what is still queued (batch cancel, suspension);
    # claim: the batched statement (CLAIM_MANY)


# The happy path's events come more often, so that sequences get far enough to be interesting.
EVENTS = [*[JobEvent.CLAIM] * 4, *[JobEvent.START] * 4, *[JobEvent.PARK] * 2,
          *[e for e in JobEvent
            if e not in (JobEvent.CREATE, JobEvent.PLACE, JobEvent.CLAIM, JobEvent.START)]]
steps = st.builds(Step, st.sampled_from(EVENTS), st.sampled_from(WORKERS),
                  st.sampled_from([0, 0, 0, -1, 1]), st.booleans())


def _statement(step: Step, jid: uuid.UUID, row_attempt: int,
               now: dt.datetime) -> tuple[Update, dict[str, Any]]:
    """The actor's statement and its values (none for one built per call)."""
    attempt, worker = row_attempt + step.attempt_offset, step.worker
    match step.event:
        case JobEvent.CLAIM if step.narrow:  # the dispatcher's batched claim, for one job
            claim = lifecycle.CLAIM_MANY
            return claim.statement, claim.params([(jid, worker)], lease_s=30, now=now)
        case JobEvent.START:
            start = lifecycle.START
            return start.statement, start.params(jid, attempt=attempt, worker_id=worker,
                                                 lease_s=30, now=now)
    return _built_per_call(step, jid, attempt, worker, now), {}


def _built_per_call(step: Step, jid: uuid.UUID, attempt: int, worker: str,
                    now: dt.datetime) -> Update:
    match step.event:
        case JobEvent.CLAIM:
            return lifecycle.claim(jid, worker_id=worker, lease_s=30, now=now)
        case JobEvent.FIRST_TOKEN:
            return lifecycle.first_token(jid, attempt=attempt, now=now)
        case JobEvent.RESUME:
            return lifecycle.record_resume(jid, attempt=attempt, worker_id=worker,
                                           event=lifecycle.job_event("resumed"), now=now)
        case JobEvent.RENEW:
            return lifecycle.renew([jid], worker_id=worker, lease_s=30, now=now)
        case JobEvent.CHECKPOINT:
            return lifecycle.checkpoint(jid, attempt=attempt, worker_id=worker,
                                        generated_ids=[now.microsecond, attempt], now=now)
        case JobEvent.PARK:
            return lifecycle.park(jid, attempt=attempt, worker_id=worker, generated_ids=[1, 2],
                                  recomputed=0, events=[lifecycle.job_event("preempted")],
                                  now=now)
        case JobEvent.FINISH | JobEvent.FAIL:
            return lifecycle.end(jid, attempt=attempt, worker_id=worker,
                                 succeeded=step.event is JobEvent.FINISH,
                                 values={"completion_tokens": 2}, now=now)
        case JobEvent.REQUEUE:  # as if every lease had run out
            return lifecycle.requeue_expired(now + dt.timedelta(hours=1))
        case JobEvent.REJECT:
            return lifecycle.reject(jid, error={"code": "slo_unattainable"}, now=now)
        case JobEvent.CANCEL:
            return lifecycle.cancel(Job.id == jid, now=now, only_queued=step.narrow)
        case JobEvent.EXPIRE:
            return lifecycle.guarded(JobEvent.EXPIRE, Job.id == jid, now=now)
    raise AssertionError(step.event)


def _snapshot(session: Session, job_id: uuid.UUID) -> dict[str, Any]:
    job = session.execute(select(Job).where(Job.id == job_id)
                          .execution_options(populate_existing=True)).scalar_one()
    return {c: getattr(job, c) for c in ("status", "attempt", "worker_id", "lease_expires_at",
                                         "first_token_at", "events", "checkpoint_token_ids",
                                         "finished_at")}


def _owns(step: Step, before: dict[str, Any]) -> bool:
    """Whether the actor of a worker event is the row's current attempt on its worker."""
    if step.event is JobEvent.FIRST_TOKEN:
        return step.attempt_offset == 0
    if step.event is JobEvent.RENEW:
        return before["worker_id"] == step.worker
    return step.attempt_offset == 0 and before["worker_id"] == step.worker


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sequence=st.lists(steps, min_size=1, max_size=14))
def test_random_event_sequences_stay_in_the_table(db_session: Session,
                                                  sequence: list[Step]) -> None:
    tenant = Tenant(name=f"lc-{uuid.uuid4().hex[:10]}")
    db_session.add(tenant)
    db_session.flush()
    job = lifecycle.new_job(tenant_id=tenant.id, kind=JobKind.REALTIME, service_tier="default",
                            priority=1, endpoint="chat.completions", model="m",
                            request={"messages": []}, stream=False, max_tokens=8)
    db_session.add(job)
    db_session.flush()
    now = dt.datetime.now(dt.UTC)
    for step in sequence:
        before = _snapshot(db_session, job.id)
        db_session.connection().execute(*_statement(step, job.id, before["attempt"], now))
        after = _snapshot(db_session, job.id)
        rule = TRANSITIONS[step.event]
        moved = after != before
        applies = JobStatus(before["status"]) in rule.sources and (
            step.event not in WORKER_EVENTS or _owns(step, before))
        if step.event is JobEvent.CANCEL and step.narrow:
            applies = applies and before["status"] == JobStatus.QUEUED
        assert moved == applies, (step, before, after)
        if applies:
            assert after["status"] == rule.target, (step, before, after)
        if after["status"] != before["status"]:
            assert (before["status"], after["status"]) in ALLOWED_MOVES, (step, before, after)
        assert after["attempt"] >= before["attempt"]
        now += dt.timedelta(milliseconds=5)


def test_the_table_only_moves_forward_from_final_statuses() -> None:
    final = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    assert not any(source in final for source, _ in ALLOWED_MOVES)
