"""The dispatcher's wake-up (scheduler/dispatcher/loop.py, ``Dispatcher.step``): once one
notification arrives, whatever else already arrived is drained without waiting. A drain with a
1 ms timeout cost every wake-up, so every realtime job's time to first token, a whole 1 ms
(bench/hop_latency.py, the notify->disp. hop)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from scheduler.dispatcher.loop import Dispatcher
from scheduler.types import JobClass, WorkerView
from service.store import wakeups
from service.store.settings import Settings

JOB = uuid.uuid4()


class Listen:
    """A LISTEN connection with one notification waiting."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def notifies(self, *, timeout: float | None = None, stop_after: int | None = None
                 ) -> Iterator[Any]:
        self.timeouts.append(timeout)
        if stop_after == 1:
            yield SimpleNamespace(payload=f"cancel:{JOB}")


def test_a_wake_up_drains_the_rest_without_waiting() -> None:
    dispatcher = Dispatcher(Settings(redis_url="redis://127.0.0.1:1/0",
                                     database_url="postgresql://nobody@127.0.0.1:1/none"))
    dispatcher._next_maintenance = dispatcher._next_scan = time.monotonic() + 3600
    dispatcher._next_outlook = time.time() + 3600  # nothing here talks to Redis or Postgres
    dispatcher.placed[str(JOB)] = ("w1", JobClass.REALTIME)
    listen = Listen()
    dispatcher.step(listen)  # type: ignore[arg-type]
    assert listen.timeouts[1:] == [0.0]  # the drain polls; only the first wait blocks
    assert str(JOB) not in dispatcher.placed  # and the notification was handled


def _placed(job: uuid.UUID, worker: str) -> str:
    view = wakeups.PlacedView(uuid.uuid4(), 1.0, 0, "m", time.time(), None, 16, 8, None, 0,
                              2.0, 1)
    return wakeups.encode(wakeups.JobPlaced(job, worker, "1", None, view))


def _dispatcher_with_a_worker() -> Dispatcher:
    """Postgres and Redis unreachable: a step that read or wrote either would raise."""
    dispatcher = Dispatcher(Settings(redis_url="redis://127.0.0.1:1/0",
                                     database_url="postgresql://nobody@127.0.0.1:1/none"))
    dispatcher.policy.on_worker_heartbeat(WorkerView("w1", ("m",), 4, 0, 100_000, 0,
                                                     time.time()))
    return dispatcher


def test_a_placed_job_is_booked_from_its_notify_without_a_read() -> None:
    dispatcher = _dispatcher_with_a_worker()
    job = uuid.uuid4()
    dispatcher._handle([_placed(job, "w1")])
    assert dispatcher.placed == {str(job): ("w1", JobClass.REALTIME)}
    assert dispatcher.awaiting_first == {str(job)}
    assert dispatcher.policy.worker_of(str(job)) == "w1"  # type: ignore[attr-defined]


def test_a_placed_job_that_ended_in_the_same_wake_up_holds_no_room() -> None:
    """Heard in order: its end, later in the same batch, frees what its placement booked (a
    job booked after its end would hold a slot until the worker's next heartbeat)."""
    dispatcher = _dispatcher_with_a_worker()
    job = uuid.uuid4()
    dispatcher._handle([_placed(job, "w1"), wakeups.encode(wakeups.JobEnded(job, "w1", 8, 4))])
    assert dispatcher.placed == {}
    assert dispatcher.awaiting_first == set()
    assert dispatcher.policy.worker_of(str(job)) is None  # type: ignore[attr-defined]
