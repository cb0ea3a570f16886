"""The API's insert of a job (service/jobs/job_records.py ``create_job``): the row and its NOTIFY
in one statement, committed, and the dispatcher's channel hears the new job only then (issue
#16: an ORM flush, a separate NOTIFY and the commit cost the realtime path a round trip and
the ORM's unit of work)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from service.cli.bootstrap import create_tenant_with_key
from service.jobs.door_request import Classification, DoorRequest
from service.jobs.job_records import create_job
from service.store import wakeups
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.jobs import Job, JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings, to_libpq_url


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of its own: the shared one's dispatcher would hear of (and keep queued) a
    job of a model no worker serves."""
    return private_database_url


def test_a_job_and_its_wake_up_are_one_statement(database_url: str) -> None:
    tenant_id, _ = create_tenant_with_key(Settings(database_url=database_url), "insert-probe")
    sessionmaker = async_sessionmaker_for(database_url)
    engine = sessionmaker.kw["bind"].sync_engine
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    listener = psycopg.connect(to_libpq_url(database_url), autocommit=True)
    listener.execute(f"LISTEN {wakeups.CHANNEL}")

    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)

    async def insert() -> Job:
        async with sessionmaker() as session:
            event.listen(engine, "before_cursor_execute", seen)
            try:
                req = DoorRequest(
                    Tenant(id=tenant_id), None, "m", "chat.completions",
                    {"messages": [{"role": "user", "content": "a\u0000b"}]}, 8, None,
                    stream=True)
                return await create_job(
                    session, req, job_id=uuid.uuid4(),
                    classification=Classification(JobKind.REALTIME, 0, "default", deadline))
            finally:
                event.remove(engine, "before_cursor_execute", seen)

    try:
        job = asyncio.run(insert())
        assert len(statements) == 1 and "INSERT INTO jobs" in statements[0]
        assert "pg_notify" in statements[0]
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
        assert [wakeups.decode(p) for p in heard] == [wakeups.JobQueued(job.id)]
    finally:
        listener.close()
    assert job.created_at is not None and job.seq is not None  # the database's, returned
    with sync_session(database_url) as session:
        row = session.get(Job, job.id)
        assert row is not None
        assert (row.status, row.attempt, row.tenant_id, row.created_at, row.seq) == (
            "queued", 0, tenant_id, job.created_at, job.seq)
        assert row.preemptions == 0 and row.request["messages"][0]["content"] != "a\u0000b"
        assert uuid.UUID(str(row.id)) == job.id
