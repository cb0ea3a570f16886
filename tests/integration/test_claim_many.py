"""The dispatcher's batched claim (service.store.job_queries.claim_jobs, one statement for a
pass's assignments) against real Postgres: each queued job goes to its own worker with the next
attempt and a lease; a job no longer queued is left out and untouched."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store import job_queries, lifecycle
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.models.tenants import Tenant


def _jobs(session: Session, n: int) -> list[uuid.UUID]:
    tenant = Tenant(name=f"cm-{uuid.uuid4().hex[:10]}")
    session.add(tenant)
    session.flush()
    jobs = [lifecycle.new_job(tenant_id=tenant.id, kind=JobKind.REALTIME,
                              service_tier="default", priority=1, endpoint="chat.completions",
                              model="m", request={"messages": []}, stream=True, max_tokens=4)
            for _ in range(n)]
    session.add_all(jobs)
    session.flush()
    return [j.id for j in jobs]


def test_one_statement_claims_each_queued_job_for_its_worker(db_session: Session) -> None:
    a, b, c, d = _jobs(db_session, 4)
    now = dt.datetime.now(dt.UTC)
    db_session.execute(lifecycle.claim(c, worker_id="w-old", lease_s=30, now=now))  # taken
    db_session.execute(lifecycle.cancel(Job.id == d, now=now))  # cancelled
    db_session.commit()
    claimed = job_queries.claim_jobs(
        db_session, placements=[(a, "w1"), (b, "w2"), (c, "w1"), (d, "w2")], lease_s=30)
    assert claimed == {a: 1, b: 1}
    rows = {r.id: r for r in db_session.execute(
        select(Job.id, Job.status, Job.worker_id, Job.attempt, Job.lease_expires_at,
               Job.assigned_at).where(Job.id.in_([a, b, c, d]))
        .execution_options(populate_existing=True))}
    assert (rows[a].status, rows[a].worker_id) == (JobStatus.ASSIGNED, "w1")
    assert (rows[b].status, rows[b].worker_id) == (JobStatus.ASSIGNED, "w2")
    assert rows[a].lease_expires_at > rows[a].assigned_at
    assert (rows[c].worker_id, rows[c].attempt) == ("w-old", 1)  # untouched
    assert rows[d].status == JobStatus.CANCELLED


def test_a_requeued_job_is_claimed_with_its_next_attempt(db_session: Session) -> None:
    (a,) = _jobs(db_session, 1)
    now = dt.datetime.now(dt.UTC)
    db_session.execute(lifecycle.claim(a, worker_id="w1", lease_s=30, now=now))
    db_session.execute(lifecycle.requeue_worker("w1", now))
    db_session.commit()
    assert job_queries.claim_jobs(db_session, placements=[(a, "w2")], lease_s=30) == {a: 2}
    assert job_queries.claim_jobs(db_session, placements=[], lease_s=30) == {}
