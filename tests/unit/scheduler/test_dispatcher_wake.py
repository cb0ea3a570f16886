"""The dispatcher's wake-up (scheduler/dispatcher/loop.py, ``Dispatcher.step``): once one
notification arrives, whatever else already arrived is drained without waiting. A drain with a
1 ms timeout cost every wake-up, so every realtime job's time to first token, a whole 1 ms
(issue #16)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from scheduler.dispatcher.loop import Dispatcher
from scheduler.types import JobClass
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
