"""A worker frozen inside a write (SIGSTOP, a stalled VM) holds its row's lock until it runs
again. The dispatcher's re-queue of a dead worker's jobs skips such a row instead of waiting
for it (service/store/lifecycle.py ``requeue_worker``): waiting stopped the whole dispatcher,
so every job's scheduling, for as long as the freeze (`fairway chaos`, "freeze worker 15s":
a 15 s token stall). The skipped row goes back once its lock is let go."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from sqlalchemy import select

from service.cli.bootstrap import create_tenant_with_key
from service.store import job_queries, lifecycle
from service.store.db import sync_session
from service.store.models.jobs import Job, JobKind
from service.store.settings import Settings, to_libpq_url


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of its own: the shared stack's dispatcher would re-queue these jobs."""
    return private_database_url


def test_a_locked_row_of_a_dead_worker_is_skipped_not_waited_for(database_url: str) -> None:
    tenant_id, _ = create_tenant_with_key(Settings(database_url=database_url), "frozen")
    now = dt.datetime.now(dt.UTC)
    with sync_session(database_url) as session:
        jobs = [lifecycle.new_job(tenant_id=tenant_id, kind=JobKind.REALTIME,
                                  service_tier="default", priority=1, endpoint="chat.completions",
                                  model="m", request={"messages": []}, stream=True, max_tokens=4)
                for _ in range(2)]
        session.add_all(jobs)
        session.flush()
        for job in jobs:
            session.execute(lifecycle.claim(job.id, worker_id="w-frozen", lease_s=30, now=now))
        session.commit()
        held, free = jobs[0].id, jobs[1].id
    frozen = psycopg.connect(to_libpq_url(database_url))  # the frozen worker, mid-write
    frozen.execute("UPDATE jobs SET updated_at = now() WHERE id = %s", (held,))
    try:
        with sync_session(database_url) as session:
            session.execute(select(1))
            session.connection().exec_driver_sql("SET lock_timeout = '5s'")
            # Waiting for the lock would end in a lock timeout error after 5 s.
            requeued = job_queries.requeue_worker_jobs(session, worker_id="w-frozen")
        assert requeued == [free]
    finally:
        frozen.rollback()  # the worker runs again and its write ends
        frozen.close()
    with sync_session(database_url) as session:
        assert job_queries.requeue_worker_jobs(session, worker_id="w-frozen") == [held]
        statuses = set(session.scalars(select(Job.status).where(Job.id.in_([held, free]))))
    assert statuses == {"queued"}
