"""One run per key at a time: callers that come while it runs share it (a "single flight").

The API reads a few things on behalf of every request (a model's outlook, the live workers'
models, a busy key's row). A burst that finds one stale must start one read, not one each:
they queued behind each other on a busy event loop (issue #14)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class SingleFlight(Generic[K, T]):
    def __init__(self) -> None:
        self._runs: dict[K, asyncio.Task[T]] = {}  # also holds the tasks (asyncio only weakly)

    def run(self, key: K, start: Callable[[], Coroutine[Any, Any, T]]) -> asyncio.Task[T]:
        """The run for ``key`` under way, or a new one of ``start()``. Awaiting it is
        optional: a failed run nobody awaits is dropped quietly, and the next call starts
        another."""
        task = self._runs.get(key)
        if task is None:
            task = self._runs[key] = asyncio.get_running_loop().create_task(start())
            task.add_done_callback(lambda done: self._finished(key, done))
        return task

    def running(self, key: K) -> bool:
        return key in self._runs

    def _finished(self, key: K, task: asyncio.Task[T]) -> None:
        if self._runs.get(key) is task:
            del self._runs[key]
        if not task.cancelled():
            task.exception()  # retrieved: no "never retrieved" warning for a background run
