"""The worker's Celery consumer: kombu's, with a reconnect backoff fit for a broker outage.

kombu waits 2 s, then 2 s longer after every failed reconnect, up to 30 s between tries. After
a minute's Redis outage a worker came back 12 s after Redis did (up to 30 s after a longer
one); its heartbeat, on its own connection, was back at once, so the dispatcher kept sending it
jobs that sat in its queue, lease after lease (found by `fairway chaos`: recovery 14.6 s).
Here the tries are 0.5 s apart at first and at most 2 s apart."""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

RECONNECT_BACKOFF = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class Consumer(CeleryConsumer):  # type: ignore[misc]  # celery is untyped
    def ensure_connected(self, conn: Any) -> Any:
        # Celery calls conn.ensure_connection(errback, max_retries, callback=...) with kombu's
        # default intervals; this connection object is new for every (re)connect.
        conn.ensure_connection = functools.partial(conn.ensure_connection, **RECONNECT_BACKOFF)
        return super().ensure_connected(conn)


CONSUMER = f"{__name__}:{Consumer.__name__}"  # for Celery's worker_consumer setting
