"""Each judged model's outlook, kept fresh in this process's memory by a thread of its own.

The SLO gate (service.api.slo_gate) judges a request on its model's outlook as this process
last read it, and a refusal on an outlook older than ``REFRESH_S`` waits for a new read. Read
on the event loop, that read is answered only once the loop has worked through everything
queued before it: in a burst of hundreds of streams, the whole burst's parsing and judging, so
every refusal that waited on it waited for the burst. This thread reads instead, every
``POLL_S``, whatever the event loop is doing (it holds the GIL only to parse the reply, and
Python hands the GIL over every few milliseconds), so the gate judges on an outlook at most
about ``POLL_S`` old and a refusal waits on no read.

Only models the gate judged in the last ``IDLE_S`` are read: an idle API reads nothing. A
failed read keeps what the gate has (it ages, and the gate reads on the event loop again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

from scheduler.outlook import RealtimeOutlook
from service.store.heartbeats import decode_outlook
from service.store.keys import outlook_key

log = logging.getLogger("fairway.api")

# Half the gate's REFRESH_S: an outlook read by this thread is fresh to the gate until the
# next one comes, with room for the thread's wait for the GIL.
POLL_S = 0.1
# A model not judged for this long is no longer read.
IDLE_S = 30.0

Store = Callable[[str, RealtimeOutlook | None], None]


class OutlookPoller:
    def __init__(self, redis: Redis, store: Store, *, poll_s: float = POLL_S,
                 idle_s: float = IDLE_S) -> None:
        self._redis = redis
        self._store = store
        self.poll_s = poll_s
        self.idle_s = idle_s
        self._watched: dict[str, float] = {}  # model -> when the gate last judged it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, model: str) -> None:
        """The gate judged ``model`` now (a dict store: safe from the event loop's thread)."""
        self._watched[model] = time.monotonic()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="fairway-outlooks",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._redis.close()

    def poll(self) -> None:
        """One round: every watched model's outlook, in one round trip."""
        now = time.monotonic()
        models = [m for m, seen in list(self._watched.items()) if now - seen < self.idle_s]
        for model in [m for m in list(self._watched) if m not in models]:
            self._watched.pop(model, None)
        if not models:
            return
        try:
            raws = self._redis.mget([outlook_key(m) for m in models])
        except RedisError:
            return
        for model, raw in zip(models, raws, strict=True):
            self._store(model, decode_outlook(raw))

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # a bad outlook must not end the thread; the gate reads itself
                log.exception("outlook poll failed")


def outlook_poller(redis_url: str, timeout_s: float, store: Store) -> OutlookPoller:
    """A poller with its own (blocking) Redis client: a hung Redis holds only this thread,
    each read giving up after ``timeout_s``."""
    redis = Redis.from_url(redis_url, socket_timeout=timeout_s,
                           socket_connect_timeout=timeout_s)
    return OutlookPoller(redis, store)
