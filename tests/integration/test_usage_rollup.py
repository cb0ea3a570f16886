"""usage_daily rolled up from the job rows (service.store.usage.roll_up): each job a worker
ended is counted once, with its own usage columns, whatever was in flight or killed meanwhile."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.store import lifecycle
from service.store.db import sync_engine, sync_session
from service.store.models.jobs import Job
from service.store.models.usage import UsageDaily
from service.store.usage import roll_up
from tests.support.stack import wait_until

W = "rollup-w"


def running_job(url: str, tenant_id: uuid.UUID, model: str,
                adapter_model: str | None = None) -> uuid.UUID:
    now = dt.datetime.now(dt.UTC)
    with sync_session(url) as session:
        job = lifecycle.new_job(tenant_id=tenant_id, kind="realtime", service_tier="default",
                                priority=1, endpoint="completions", model=model,
                                adapter_model=adapter_model, request={"prompt": "p"},
                                stream=False, max_tokens=8)
        session.add(job)
        session.flush()
        session.execute(lifecycle.claim(job.id, worker_id=W, lease_s=30, now=now))
        start = lifecycle.START
        session.connection().execute(start.statement, start.params(
            job.id, attempt=1, worker_id=W, lease_s=30, now=now))
        session.commit()
        return job.id


def end(session: Session, job_id: uuid.UUID, n: int, succeeded: bool = True) -> None:
    values: dict[str, Any] = ({"prompt_tokens": n, "completion_tokens": 2 * n,
                               "cached_tokens": 1, "finish_reason": "length"}
                              if succeeded else {"error": {"code": "engine_error"}})
    assert session.execute(lifecycle.end(job_id, attempt=1, worker_id=W, succeeded=succeeded,
                                         values=values, now=dt.datetime.now(dt.UTC))).first()


def usage(url: str, tenant_id: uuid.UUID) -> tuple[int, int, int, int, int]:
    with sync_session(url) as session:
        row = session.execute(select(
            func.coalesce(func.sum(UsageDaily.requests), 0),
            func.coalesce(func.sum(UsageDaily.failed_requests), 0),
            func.coalesce(func.sum(UsageDaily.prompt_tokens), 0),
            func.coalesce(func.sum(UsageDaily.completion_tokens), 0),
            func.coalesce(func.sum(UsageDaily.cached_tokens), 0))
            .where(UsageDaily.tenant_id == tenant_id)).one()
        return tuple(int(x) for x in row)  # type: ignore[return-value]


def from_jobs(url: str, tenant_id: uuid.UUID) -> tuple[int, int, int, int, int]:
    """What usage must say: the sum of the job rows the workers ended."""
    with sync_session(url) as session:
        row = session.execute(select(
            func.count(), func.count().filter(Job.status != "succeeded"),
            func.coalesce(func.sum(Job.prompt_tokens), 0),
            func.coalesce(func.sum(Job.completion_tokens), 0),
            func.coalesce(func.sum(Job.cached_tokens), 0))
            .where(Job.tenant_id == tenant_id, Job.status.in_(["succeeded", "failed"]))).one()
        return tuple(int(x) for x in row)  # type: ignore[return-value]


def roll(url: str) -> None:
    with sync_session(url) as session:
        roll_up(session)


def roll_until(url: str, tenant_id: uuid.UUID, expected: tuple[int, ...]) -> None:
    """The cursor stops below the cluster's oldest running transaction: on a shared server
    another database's transaction may hold it back for a moment (never lose a job)."""
    def counted() -> bool:
        roll(url)
        return usage(url, tenant_id) == expected
    wait_until(counted, 30, f"usage {expected}")


def test_each_ended_job_counts_once(database_url, make_tenant):
    tenant_id, _ = make_tenant()
    jobs = [running_job(database_url, tenant_id, "m-a") for _ in range(3)]
    with sync_session(database_url) as session:
        end(session, jobs[0], 5)
        end(session, jobs[1], 7)
        end(session, jobs[2], 0, succeeded=False)
        session.commit()
    assert from_jobs(database_url, tenant_id) == (3, 1, 12, 24, 2)
    roll_until(database_url, tenant_id, (3, 1, 12, 24, 2))
    roll(database_url)  # nothing new: nothing added twice
    assert usage(database_url, tenant_id) == (3, 1, 12, 24, 2)


def test_an_adapter_job_counts_under_its_ft_name(database_url, make_tenant):
    tenant_id, _ = make_tenant()
    tuned = "ft:m-b:acme:tuned"
    jobs = [running_job(database_url, tenant_id, "m-b"),
            running_job(database_url, tenant_id, "m-b", adapter_model=tuned)]
    with sync_session(database_url) as session:
        end(session, jobs[0], 5)
        end(session, jobs[1], 7)
        session.commit()
    roll_until(database_url, tenant_id, (2, 0, 12, 24, 2))
    with sync_session(database_url) as session:
        rows = session.execute(select(UsageDaily.model, UsageDaily.prompt_tokens)
                               .where(UsageDaily.tenant_id == tenant_id)).tuples().all()
    assert sorted(rows) == [("ft:m-b:acme:tuned", 7), ("m-b", 5)]


def test_an_end_still_in_flight_is_counted_once_it_commits(database_url, make_tenant):
    """A later transaction committing first must not move the cursor past an earlier one."""
    tenant_id, _ = make_tenant()
    early, late = (running_job(database_url, tenant_id, "m-b") for _ in range(2))
    slow = Session(sync_engine(database_url))
    try:
        end(slow, early, 3)  # holds the lower transaction id, not committed yet
        with sync_session(database_url) as session:
            end(session, late, 4)
            session.commit()
        roll(database_url)
        assert usage(database_url, tenant_id) == (0, 0, 0, 0, 0)  # waits for the early one
        slow.commit()
    finally:
        slow.close()
    assert from_jobs(database_url, tenant_id) == (2, 0, 7, 14, 2)
    roll_until(database_url, tenant_id, (2, 0, 7, 14, 2))


def test_a_rolled_back_end_counts_nothing(database_url, make_tenant):
    tenant_id, _ = make_tenant()
    lost, kept = (running_job(database_url, tenant_id, "m-c") for _ in range(2))
    with sync_session(database_url) as session:  # a worker killed before its commit
        end(session, lost, 9)
        session.rollback()
    with sync_session(database_url) as session:
        end(session, kept, 4)
        session.commit()
    assert from_jobs(database_url, tenant_id) == (1, 0, 4, 8, 1)
    roll_until(database_url, tenant_id, (1, 0, 4, 8, 1))  # the cursor went past the lost one
