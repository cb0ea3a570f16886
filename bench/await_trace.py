"""Where a coroutine waits: run it stepped by hand, recording each time it yields to the event
loop (a real suspension, not an ``await`` that completes at once), with the await chain it
yielded from and how long it stayed suspended.

A refusal at the door that never yields is answered in its first turn of the event loop; one
that yields once waits, in a burst, behind every request queued meanwhile. This tells which
await it was (bench/refusal_path.py --burst). A bench tool: stepping costs a little CPU per
suspension, so time a run without it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(slots=True)
class Suspension:
    chain: tuple[str, ...]  # innermost last: "path:line function"
    waited_s: float


@dataclass(slots=True)
class Trace:
    suspensions: list[Suspension] = field(default_factory=list)

    def site(self, depth: int = 3) -> list[str]:
        """Each suspension's innermost ``depth`` frames, outermost first, as one line."""
        return [" <- ".join(reversed(s.chain[-depth:])) for s in self.suspensions]


def await_chain(coro: Any) -> tuple[str, ...]:
    """The frames a suspended coroutine is waiting in, outermost first."""
    frames: list[str] = []
    while coro is not None:
        frame = (getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                 or getattr(coro, "ag_frame", None))
        if frame is not None:
            path = os.path.relpath(frame.f_code.co_filename, ROOT)
            frames.append(f"{path}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = (getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
                or getattr(coro, "ag_await", None))
    return tuple(frames)


async def traced(coro: Coroutine[Any, Any, T], trace: Trace) -> T:
    """Await ``coro``, recording in ``trace`` every time it yields to the event loop."""
    loop = asyncio.get_running_loop()
    error: BaseException | None = None
    while True:
        try:
            future = coro.throw(error) if error is not None else coro.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        error = None
        chain = await_chain(coro)
        began = time.perf_counter()
        try:
            if future is None:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
            else:  # a future the coroutine waits on: resume it once that is done
                future._asyncio_future_blocking = False
                woken = loop.create_future()
                future.add_done_callback(
                    lambda _, w=woken: None if w.done() else w.set_result(None))
                await woken
        except BaseException as exc:  # cancelled while suspended: into the coroutine
            error = exc
        trace.suspensions.append(Suspension(chain, time.perf_counter() - began))
