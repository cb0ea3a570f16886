"""Leadership a hung leader cannot keep (scheduler.dispatcher.leader): an active dispatcher that
stops without dying (a deadlock, a paused VM, SIGSTOP) kept its lock's session, and the standby
waited on the lock forever. Now the server ends a lock session that went silent, a standby
takes over within seconds, and the old leader's claims, once it resumes, are refused."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from scheduler.dispatcher.leader import Leadership, LostLeadership, acquire_leadership
from scheduler.dispatcher.loop import Dispatcher
from service.store import job_queries, lifecycle
from service.store.db import sync_session
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.models.tenants import Tenant
from service.store.outages import POSTGRES, Dependencies
from service.store.settings import DispatcherSettings, Settings
from tests.support.services import claim_redis_db, release_redis_db

log = logging.getLogger("test.leader")
TIMEOUT_S = 1.0  # the leader timeout these tests run with


def _acquire(url: str, give_up_s: float) -> tuple[Leadership | None, float]:
    """A standby's wait for the lock, for at most ``give_up_s``: (its hold, seconds waited)."""
    stop = threading.Event()
    timer = threading.Timer(give_up_s, stop.set)
    timer.start()
    started = time.monotonic()
    try:
        held = acquire_leadership(url, stop, Dependencies(log).states[POSTGRES],
                                  idle_timeout_s=TIMEOUT_S, poll_s=0.1)
    finally:
        timer.cancel()
    return held, time.monotonic() - started


@pytest.fixture
def leader(private_database_url: str) -> Iterator[Leadership]:
    held, _ = _acquire(private_database_url, 5.0)
    assert held is not None
    yield held
    held.close()


def _queued_job(url: str) -> uuid.UUID:
    with sync_session(url) as session:
        tenant = Tenant(name=f"lf-{uuid.uuid4().hex[:10]}")
        session.add(tenant)
        session.flush()
        job = lifecycle.new_job(tenant_id=tenant.id, kind=JobKind.REALTIME,
                                service_tier="default", priority=1, endpoint="chat.completions",
                                model="m", request={"messages": []}, stream=True, max_tokens=4)
        session.add(job)
        session.commit()
        return job.id


def _status(url: str, job_id: uuid.UUID) -> str:
    with sync_session(url) as session:
        return str(session.scalar(select(Job.status).where(Job.id == job_id)))


def test_a_standby_waits_while_the_leader_pings(private_database_url: str,
                                                leader: Leadership) -> None:
    stop_pinging = threading.Event()

    def ping() -> None:
        while not stop_pinging.wait(0.3):
            leader.ping()

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        standby, _ = _acquire(private_database_url, 3 * TIMEOUT_S)
    finally:
        stop_pinging.set()
        pinger.join()
    assert standby is None
    job_id = _queued_job(private_database_url)
    with leader.writes() as session:  # the live leader's claims pass
        assert job_queries.claim_jobs(session, placements=[(job_id, "w1")], lease_s=30) \
            == {job_id: 1}


def test_a_silent_leader_is_replaced_and_its_claims_refused(private_database_url: str,
                                                            leader: Leadership) -> None:
    job_id = _queued_job(private_database_url)
    # The leader goes silent (frozen): a standby takes over once the timeout ends its session.
    standby, waited = _acquire(private_database_url, 10.0)
    assert standby is not None, "the standby never got the lock of a silent leader"
    try:
        assert waited < TIMEOUT_S + 2.0
        # The old leader resumes where it stopped, about to place a job: refused.
        with pytest.raises(LostLeadership), leader.writes() as session:
            job_queries.claim_jobs(session, placements=[(job_id, "w-old")], lease_s=30)
        assert _status(private_database_url, job_id) == JobStatus.QUEUED
        with pytest.raises(LostLeadership):  # and its loop's ping says so
            leader.ping()
        with pytest.raises(LostLeadership), leader.writes() as session:  # no quiet reconnect
            job_queries.claim_jobs(session, placements=[(job_id, "w-old")], lease_s=30)
        with standby.writes() as session:  # the new leader places it
            assert job_queries.claim_jobs(session, placements=[(job_id, "w-new")],
                                          lease_s=30) == {job_id: 1}
    finally:
        standby.close()


@pytest.fixture
def two_dispatchers(private_database_url: str) -> Iterator[tuple[Dispatcher, Dispatcher]]:
    redis_url = claim_redis_db()  # no other stack's leader beat or workers
    settings = Settings(database_url=private_database_url, redis_url=redis_url,
                        dispatcher=DispatcherSettings(leader_timeout_seconds=TIMEOUT_S))
    yield Dispatcher(settings), Dispatcher(settings)
    release_redis_db(redis_url)


def test_a_hung_dispatcher_is_replaced_and_stands_down_when_it_resumes(
        two_dispatchers: tuple[Dispatcher, Dispatcher]) -> None:
    first, second = two_dispatchers
    stepped, frozen, thawed = threading.Event(), threading.Event(), threading.Event()
    real_step = first.step

    def step(listen_conn: Any, max_wait_s: float = 0.5) -> None:
        stepped.set()
        if frozen.is_set():  # hung in its loop, its process and sockets alive
            thawed.wait(30)
        real_step(listen_conn, max_wait_s)

    first.step = step  # type: ignore[method-assign]
    stop_first, stop_second = threading.Event(), threading.Event()
    leading = threading.Thread(target=first.lead, args=(stop_first,))
    standing_by = threading.Thread(target=second.lead, args=(stop_second,))
    leading.start()
    try:
        assert stepped.wait(20) and first.leadership is not None
        standing_by.start()
        time.sleep(1.0)
        assert second.leadership is None  # the first leads and pings: the second waits
        frozen.set()
        hung = time.monotonic()
        while second.leadership is None and time.monotonic() - hung < 15:
            time.sleep(0.05)
        took = time.monotonic() - hung
        assert second.leadership is not None, "the standby never replaced a hung leader"
        assert took < TIMEOUT_S + 3.0
        thawed.set()  # it resumes: learns it lost the lock, and its term ends
        leading.join(10)
        assert not leading.is_alive() and first.leadership is None
        assert second.leadership is not None
    finally:
        thawed.set()
        stop_first.set()
        stop_second.set()
        leading.join(10)
        if standing_by.ident is not None:  # started
            standing_by.join(10)
