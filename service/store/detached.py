"""Work that runs on after its caller: a task kept referenced until it ends (asyncio holds
tasks only weakly, so an unreferenced one may vanish mid-way), for code that may be
mid-cancellation and must not await (a stream's ``finally``, a release, a ticket's return)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

_running: set[asyncio.Task[Any]] = set()


def run_detached(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
