"""A leader term that starts after a Redis restart: the workers' heartbeat keys expired with
the outage, while the jobs placed on them are read back from Postgres. Every worker with
placed jobs counted as lost at the term's first look, and every running job was re-run (76 of
them, 50 ms after Redis came back). Now they have a lease to be heard again."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from redis import Redis
from sqlalchemy import select

from scheduler.dispatcher.loop import Dispatcher
from service.store import job_queries, lifecycle
from service.store.db import sync_autocommit_session, sync_session
from service.store.keys import worker_key
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.models.tenants import Tenant
from service.store.settings import JobSettings, Settings
from tests.support.services import claim_redis_db, release_redis_db

LEASE_S = 2.0


@pytest.fixture
def settings(private_database_url: str) -> Iterator[Settings]:
    url = claim_redis_db()  # empty, as a Redis whose keys expired during its outage
    yield Settings(database_url=private_database_url, redis_url=url,
                   jobs=JobSettings(lease_seconds=LEASE_S))
    release_redis_db(url)


def _placed_jobs(url: str, worker_id: str, n: int) -> list[uuid.UUID]:
    """``n`` jobs the term before placed on ``worker_id``, with leases it still renews."""
    with sync_session(url) as session:
        tenant = Tenant(name=f"rr-{uuid.uuid4().hex[:10]}")
        session.add(tenant)
        session.flush()
        jobs = [lifecycle.new_job(tenant_id=tenant.id, kind=JobKind.BATCH,
                                  service_tier="default", priority=1,
                                  endpoint="chat.completions", model="m",
                                  request={"messages": []}, stream=False, max_tokens=4)
                for _ in range(n)]
        session.add_all(jobs)
        session.commit()
        ids = [j.id for j in jobs]
    with sync_autocommit_session(url) as session:
        job_queries.claim_jobs(session, placements=[(i, worker_id) for i in ids], lease_s=300)
    return ids


def _statuses(url: str, ids: list[uuid.UUID]) -> set[str]:
    with sync_session(url) as session:
        return {str(s) for s in session.scalars(select(Job.status).where(Job.id.in_(ids)))}


def _beat(redis: Redis, worker_id: str) -> None:
    redis.set(worker_key(worker_id), json.dumps({
        "worker_id": worker_id, "models": ["m"], "max_slots": 4, "running": 2,
        "kv_capacity_tokens": 10_000, "ts": time.time(), "incarnation": "7-1.0"}), ex=30)


def test_a_new_term_waits_for_the_workers_to_beat_again(settings: Settings) -> None:
    url = settings.database_url
    first, second = _placed_jobs(url, "rr-1", 2), _placed_jobs(url, "rr-2", 2)
    dispatcher = Dispatcher(settings)
    dispatcher._bootstrap()  # the new term's first look: no heartbeat in Redis yet
    assert _statuses(url, first + second) == {JobStatus.ASSIGNED}, "re-queued at once"
    redis = Redis.from_url(settings.redis_url)
    _beat(redis, "rr-1")  # back within a few heartbeats: its jobs stay where they run
    dispatcher._refresh_workers()
    assert dispatcher.workers == {"rr-1"}
    assert _statuses(url, first + second) == {JobStatus.ASSIGNED}
    time.sleep(LEASE_S + 0.1)  # rr-2 never beats: after a lease it is lost as before
    _beat(redis, "rr-1")
    dispatcher._refresh_workers()
    assert _statuses(url, first) == {JobStatus.ASSIGNED}
    assert _statuses(url, second) == {JobStatus.QUEUED}
