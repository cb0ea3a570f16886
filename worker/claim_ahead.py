"""The claim of a hand-off that was sent alongside its row's insert, not after its commit (the
express path, service.jobs.express_handoff): the worker may read the entry before the row is there.

Such a claim starts with the job's first token, which may leave before it (its API relays
the stream only after its commit; worker.claimed_job), or ``AHEAD_CLAIM_AFTER_S`` after the
entry, whichever comes first. One that finds nothing waits for the row rather than taking the
entry for stale. It polls whether the row exists (backing off from 1 ms to 50 ms) and claims
once it does: the row's state then says whether this attempt is the job's (claimed) or not
(stale, as any other failed claim). A row that never appears (the API's insert failed, or its
process died before the commit) is given up after ``AHEAD_WAIT_S``: at most the first token
left the worker, to a stream nobody reads (it is given a TTL), and the early-started engine
request is aborted. An insert slower than that which still commits leaves its job assigned
here unclaimed: it is re-queued at its lease's end, as a lost hand-off is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

AHEAD_WAIT_S = 5.0
# Such a claim starts with the job's first token, or this long after the entry, whichever is
# first (worker.runner): off the prefill's CPU at idle, and well within the lease the insert
# gave the job (a job merely assigned is not renewed; a claimed one is, on every heartbeat).
AHEAD_CLAIM_AFTER_S = 0.5
_FIRST_POLL_S = 0.001
_MAX_POLL_S = 0.05


async def claim_when_committed(claim: Callable[[], Awaitable[T | None]],
                               exists: Callable[[], Awaitable[bool]], *,
                               wait_s: float | None = None) -> T | None:
    """Call after ``claim()`` found nothing: claim again once ``exists()``, or None when the
    row is still not there after ``wait_s`` (default ``AHEAD_WAIT_S``). Claimed only after
    the row was seen, so a row that committed between a failed claim and the look is
    claimed, not taken for stale."""
    deadline = time.monotonic() + (AHEAD_WAIT_S if wait_s is None else wait_s)
    delay = _FIRST_POLL_S
    while True:
        if await exists():
            return await claim()
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_POLL_S)
