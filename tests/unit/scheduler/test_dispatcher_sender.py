"""The dispatcher's ``Sender`` (scheduler/dispatcher/sends.py) serves one leader term: it is
built with that term's policy, hop traces and books, shares the books with the loop, and
books what the API placed at insert. Its sends against Redis, Celery and Postgres are in
tests/integration/test_dispatcher_sends.py."""

from __future__ import annotations

import time
import uuid

from scheduler.dispatcher.loop import Dispatcher
from scheduler.dispatcher.silence import PoolSilence
from scheduler.types import JobClass, WorkerView
from service.store import job_queries as store
from service.store import wakeups
from service.store.settings import Settings


def _dispatcher() -> Dispatcher:
    """Postgres and Redis unreachable: anything here that read or wrote either would raise."""
    return Dispatcher(Settings(redis_url="redis://127.0.0.1:1/0",
                               database_url="postgresql://nobody@127.0.0.1:1/none"))


def test_each_term_gets_a_sender_on_that_terms_books() -> None:
    dispatcher = _dispatcher()
    first = dispatcher.sender
    dispatcher.placed["old"] = ("w1", JobClass.BATCH)
    dispatcher._new_term()  # e.g. after a failover: the term starts from nothing
    sender = dispatcher.sender
    assert sender is not first and sender.placed == {}
    assert sender.policy is dispatcher.policy and sender.hops is dispatcher.hops
    assert sender.placed is dispatcher.placed and sender.classes is dispatcher.classes
    assert sender.bodies is dispatcher.bodies
    assert sender.awaiting_first is dispatcher.awaiting_first
    assert sender.redis is dispatcher.redis and sender.celery is dispatcher.celery


def _placed_job() -> store.QueuedJob:
    view = wakeups.PlacedView(uuid.uuid4(), 1.0, 0, "m", time.time(), None, 16, 8, None, 0,
                              2.0, 1)
    return store.placed_queued(uuid.uuid4(), view)


def test_a_placed_job_is_booked_where_the_policy_has_its_worker() -> None:
    dispatcher = _dispatcher()
    dispatcher.policy.on_worker_heartbeat(WorkerView("w1", ("m",), 4, 0, 100_000, 0,
                                                     time.time()))
    job = _placed_job()
    assert dispatcher.sender.book_placed(job, "w1")
    job_id = str(job.job_id)
    assert dispatcher.placed == {job_id: ("w1", JobClass.REALTIME)}
    assert dispatcher.awaiting_first == {job_id}  # the loop sees what the sender booked
    assert dispatcher.policy.worker_of(job_id) == "w1"  # type: ignore[attr-defined]


def test_a_placed_job_on_a_worker_the_policy_lacks_is_not_booked() -> None:
    dispatcher = _dispatcher()
    assert not dispatcher.sender.book_placed(_placed_job(), "w-gone")
    assert dispatcher.placed == {} and dispatcher.awaiting_first == set()


def test_no_decisions_touch_nothing() -> None:
    dispatcher = _dispatcher()
    dispatcher.sender.act([])  # would raise on the unreachable Postgres otherwise


def test_a_silent_pool_is_left_to_its_leases_for_up_to_a_lease() -> None:
    silence = PoolSilence(lease_s=3600.0)
    assert not silence.holds([], known=set())  # no workers known: nothing to hold back
    assert silence.holds([], known={"w1"})
    assert silence.holds([], known={"w1"})  # still within the lease
    assert not silence.holds([{"worker_id": "w1"}], known={"w1"})  # heard again
    assert silence.since is None
    assert not PoolSilence(lease_s=0.0).holds([], known={"w1"})  # a lease gone: lost as before
