"""The realtime submit path's Postgres work runs without a transaction around it:
the door's policy read and the job's insert (with its NOTIFY) are single statements, and a
transaction around them cost a BEGIN and a COMMIT round trip and held a snapshot open across
the quota and SLO checks between them (``service.store.db.without_transaction``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text

from service.cli.bootstrap import create_tenant_with_key
from service.jobs.door_request import Classification, DoorRequest
from service.jobs.job_records import create_job
from service.quotas.policy import load_policy
from service.store import wakeups
from service.store.db import async_sessionmaker_for, sync_session, without_transaction
from service.store.models.jobs import Job, JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings, to_libpq_url


@pytest.fixture
def database_url(private_database_url: str) -> str:
    """A database of its own: the shared one's dispatcher would hear of the job."""
    return private_database_url


def test_the_door_and_the_insert_each_commit_alone(database_url: str) -> None:
    tenant_id, _ = create_tenant_with_key(Settings(database_url=database_url), "door-tx")
    sessionmaker = async_sessionmaker_for(database_url)
    engine = sessionmaker.kw["bind"].sync_engine
    seen: list[tuple[str, bool]] = []  # (statement, the DBAPI connection in autocommit)

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((statement.split()[0], conn.connection.dbapi_connection.autocommit))

    listener = psycopg.connect(to_libpq_url(database_url), autocommit=True)
    listener.execute(f"LISTEN {wakeups.CHANNEL}")

    async def submit() -> tuple[Job, list[int]]:
        async with sessionmaker() as session:
            event.listen(engine, "before_cursor_execute", before)
            try:
                await session.execute(text("SELECT 1"))  # as the key lookup's read on a miss
                assert session.in_transaction()
                await without_transaction(session)
                policy = await load_policy(session, tenant_id=tenant_id, plan="standard")
                assert policy.plan == "standard"
                # Two reads now see two transactions: nothing holds one open between them.
                xids = [(await session.execute(text("SELECT txid_current()"))).scalar_one()
                        for _ in range(2)]
                req = DoorRequest(Tenant(id=tenant_id), None, "m", "chat.completions",
                                  {"messages": [{"role": "user", "content": "hi"}]}, 8, None,
                                  stream=True)
                job = await create_job(
                    session, req, job_id=uuid.uuid4(), classification=Classification(
                        JobKind.REALTIME, 0, "default",
                        dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)))
                return job, xids
            finally:
                event.remove(engine, "before_cursor_execute", before)

    try:
        job, xids = asyncio.run(submit())
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    finally:
        listener.close()
    assert seen[0] == ("SELECT", False)  # before: inside the lookup's transaction
    assert all(autocommit for _, autocommit in seen[1:]), seen
    assert [verb for verb, _ in seen[1:]] == ["SELECT", "SELECT", "SELECT", "WITH"]
    assert xids[0] != xids[1]
    assert [wakeups.decode(p) for p in heard] == [wakeups.JobQueued(job.id)]
    with sync_session(database_url) as session:  # committed, as the route answers 2xx after
        row = session.get(Job, job.id)
        assert row is not None and row.status == "queued"


def test_no_connection_is_held_from_the_door_until_the_first_statement(database_url: str) -> None:
    """A request whose policy is cached reads nothing at the door: its connection is taken by
    the insert, not held across the quota and SLO Redis calls before it."""
    sessionmaker = async_sessionmaker_for(database_url)
    pool = sessionmaker.kw["bind"].sync_engine.pool

    async def run() -> list[int]:
        async with sessionmaker() as session:
            before = pool.checkedout()  # type: ignore[attr-defined]
            await without_transaction(session)
            at_door = pool.checkedout()  # type: ignore[attr-defined]
            await session.execute(text("SELECT 1"))
            in_use = pool.checkedout()  # type: ignore[attr-defined]
            await session.commit()
            return [at_door - before, in_use - before, pool.checkedout() - before]  # type: ignore[attr-defined]

    assert asyncio.run(run()) == [0, 1, 0]
