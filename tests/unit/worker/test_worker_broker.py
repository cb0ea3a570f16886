"""A worker reconnects to its broker within seconds of its return (worker.broker): kombu's own
backoff (2 s, growing by 2 s to 30 s) kept workers away for 12 s after a minute's outage."""

from __future__ import annotations

from typing import Any

from celery.utils.imports import symbol_by_name

from service.store.settings import Settings
from service.store.task_queue import make_celery
from worker.broker import CONSUMER


class FakeConnection:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def ensure_connection(self, *args: Any, **kwargs: Any) -> FakeConnection:
        self.calls.append(kwargs)
        return self


def test_reconnect_tries_are_at_most_two_seconds_apart() -> None:
    app = make_celery(Settings(redis_url="redis://127.0.0.1:1/0"))
    app.conf.worker_consumer = CONSUMER
    consumer_cls = symbol_by_name(app.conf.worker_consumer)
    consumer = consumer_cls.__new__(consumer_cls)  # just the reconnect, no bootsteps
    consumer.app = app
    consumer.first_connection_attempt = False
    consumer.broker_connection_retry_attempt = 0
    conn = FakeConnection()
    assert consumer.ensure_connected(conn) is conn
    (kwargs,) = conn.calls
    assert kwargs["interval_max"] <= 2.0 and kwargs["interval_start"] <= 0.5
    assert kwargs["callback"] is not None  # Celery's own arguments still pass through
