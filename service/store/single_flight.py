"""One run per key at a time: callers that come while it runs share it (a "single flight").

The API reads a few things on behalf of every request (a model's outlook, the live workers'
models, a busy key's row). A burst that finds one stale must start one read, not one each:
they queued behind each other on a busy event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

# How long a background renewal started by a request waits before it reads: past that
# request's own critical path (its door, hand-off and first token), which the read's CPU on the
# same event loop lengthened by 2-3 ms on a quiet two-core host (bench/idle_ttft_pairs.py). Well
# inside every renewing cache's margin (renewal at half a TTL of seconds).
RENEW_AFTER_S = 0.25


class SingleFlight(Generic[K, T]):
    def __init__(self) -> None:
        self._runs: dict[K, asyncio.Task[T]] = {}  # also holds the tasks (asyncio only weakly)

    def run(self, key: K, start: Callable[[], Coroutine[Any, Any, T]], *,
            after_s: float = 0.0, name: str | None = None) -> asyncio.Task[T]:
        """The run for ``key`` under way, or a new one of ``start()``. Awaiting it is
        optional: a failed run nobody awaits is dropped quietly, and the next call starts
        another. ``after_s``: a new run starts that much later (and counts as under way
        meanwhile), e.g. a renewal that should not share the event loop with the request
        that found its entry old (``RENEW_AFTER_S``). ``name``: the new run's task name,
        to tell a read on requests' path from a background one (logs, tests)."""
        task = self._runs.get(key)
        if task is None:
            work = start() if not after_s else _after(after_s, start)
            task = self._runs[key] = asyncio.get_running_loop().create_task(work, name=name)
            task.add_done_callback(lambda done: self._finished(key, done))
        return task

    def running(self, key: K) -> bool:
        return key in self._runs

    def _finished(self, key: K, task: asyncio.Task[T]) -> None:
        if self._runs.get(key) is task:
            del self._runs[key]
        if not task.cancelled():
            task.exception()  # retrieved: no "never retrieved" warning for a background run


def renew_delay(ttl_s: float, after_s: float = RENEW_AFTER_S) -> float:
    """How long a renewal of an entry living ``ttl_s`` waits: ``after_s``, but never more
    than a quarter of the TTL (a renewal starts at half of it)."""
    return min(after_s, ttl_s / 4)


async def _after(delay_s: float, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    await asyncio.sleep(delay_s)
    return await start()
