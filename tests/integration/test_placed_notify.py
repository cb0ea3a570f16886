"""A placed job's NOTIFY carries the dispatcher's view of it (service.store.wakeups.PlacedView),
so the dispatcher books an express job without reading its row back. The view it
carries must be the one the dispatcher would have read: same policy inputs, field by field."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import psycopg
from sqlalchemy import update

from scheduler.dispatcher.views import job_view
from service.cli.bootstrap import create_tenant_with_key
from service.jobs.door_request import Classification, DoorRequest
from service.jobs.express_handoff import Express, Ticket
from service.jobs.job_records import create_job
from service.store import job_queries, wakeups
from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.jobs import Job, JobKind
from service.store.models.plans import Plan
from service.store.models.tenants import Tenant
from service.store.settings import Settings, to_libpq_url


def test_the_notify_of_a_placed_job_carries_what_the_dispatcher_would_read(
        private_database_url: str) -> None:
    settings = Settings(database_url=private_database_url)
    tenant_id, _ = create_tenant_with_key(settings, "placed-view")
    with sync_session(private_database_url) as session:
        session.execute(update(Tenant).where(Tenant.id == tenant_id).values(weight=3.5))
        plan = session.get(Tenant, tenant_id).plan  # type: ignore[union-attr]
        row = session.get(Plan, plan)
        assert row is not None and row.admission_mode == "queue"
        ttft_ms, max_wait_s = row.ttft_slo_ms, row.max_queue_wait_ms / 1000
        session.commit()
    listener = psycopg.connect(to_libpq_url(private_database_url), autocommit=True)
    listener.execute(f"LISTEN {wakeups.CHANNEL}")
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=45)
    request = {"messages": [{"role": "system", "content": "You are terse. " * 20},
                            {"role": "user", "content": "name a colour"}]}

    async def insert() -> Job:
        async with async_sessionmaker_for(private_database_url)() as session:
            req = DoorRequest(Tenant(id=tenant_id), None, "m", "chat.completions", request,
                              24, None, stream=True)
            return await create_job(
                session, req, job_id=uuid.uuid4(),
                classification=Classification(JobKind.REALTIME, 2, "default", deadline),
                express=Express(Ticket("gpu:7", "t9"), 30.0, 3.5, ttft_ms / 1000, max_wait_s))

    try:
        job = asyncio.run(insert())
        heard = [wakeups.decode(n.payload) for n in listener.notifies(timeout=2, stop_after=1)]
    finally:
        listener.close()
    placed, = heard
    assert isinstance(placed, wakeups.JobPlaced) and placed.view is not None
    assert (placed.job_id, placed.worker_id, placed.ticket) == (job.id, "gpu:7", "t9")
    from_notify = job_view(job_queries.placed_queued(job.id, placed.view))
    with sync_session(private_database_url) as session:
        read, = job_queries.fetch_placed(session, job_ids=[job.id])
    from_row = job_view(read)
    assert from_notify.prefix_key is not None and from_notify.tenant_weight == 3.5
    # The arrival is the API's clock at the insert, the row's the database's: the same box.
    assert abs(from_notify.arrival - from_row.arrival) < 1.0
    assert from_notify.ttft_slo_s is not None and from_row.ttft_slo_s is not None
    assert abs(from_notify.ttft_slo_s - from_row.ttft_slo_s) < 1.0
    same = {"arrival": 0.0, "ttft_slo_s": 0.0}
    assert {**vars_of(from_notify), **same} == {**vars_of(from_row), **same}


def vars_of(view: Any) -> dict[str, Any]:
    return {name: getattr(view, name) for name in view.__dataclass_fields__}
