"""The waiting room: a request for a model no live worker serves (scaled to zero, or its
workers not up yet) waits for one instead of being refused.

The request is admitted and its job stored and queued as any other, before any answer is
sent, so nothing is lost; the autoscaler sees it waiting and asks for a worker
(scheduler.autoscale, ``wake``). A ``Watch`` beside the request's relay looks for a live
worker every ``POLL_S``. Once one serves the model, the watch ends and the job runs as usual.
If none has come within ``FAIRWAY_WAITING_ROOM_SECONDS``, the job, if still queued, ends
(``failed``, code ``model_unavailable``: the same guarded queued -> failed change as a policy's
refusal, so a worker that claimed it meanwhile keeps it) and its stream's end says so; the
request's relay reads that end as any other and answers 503 + Retry-After, not a 429: the
service is starting, not refusing this tenant. The request's quota reservation is given back
whole: nothing ran.

A streaming request is held before its headers for up to ``KEEPALIVE_S``: a short wait ends
in a real 503 (or in the stream, if a worker came). Past that the stream opens and a comment
line every ``KEEPALIVE_S`` keeps it alive (clients and SDKs skip comment lines, balancers see
traffic); an expiry then ends the stream with an error event.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from service.store import lifecycle, wakeups
from service.store.job_stream import Failure, fields
from service.store.keys import stream_key
from service.store.response_events import record_response_end_async
from service.store.settings import Settings
from service.web.errors import APIError

log = logging.getLogger("fairway.api")
T = TypeVar("T")

POLL_S = 1.0  # how often a waiting request looks for a live worker
KEEPALIVE_S = 10.0  # a waiting stream's headers are held this long, then a comment this often
RETRY_AFTER_S = 30  # a worker asked for is minutes from serving: come back in a while
UNAVAILABLE = "model_unavailable"


def unavailable_message(model: str, waited_s: float) -> str:
    return (f"No worker serves the model '{model}' yet (it is scaled to zero, or its workers "
            f"are starting): the request waited {waited_s:g} s for one. Retry in "
            f"{RETRY_AFTER_S} s.")


def unavailable_error(message: str) -> APIError:
    """What the relay makes of the ended job's stream (service.api.relay.job_error), for a
    request that ends before its relay starts."""
    return APIError(503, message, code=UNAVAILABLE, headers={"Retry-After": str(RETRY_AFTER_S)})


class Watch:
    """One request's stay in the waiting room. ``waiting``: it entered (no live worker served
    its model then); ``expired``: the error it left with, no worker having come (its job
    ended), else None."""

    def __init__(self, task: asyncio.Task[APIError | None] | None = None) -> None:
        self._task = task
        self.waiting = task is not None

    @property
    def expired(self) -> APIError | None:
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    @property
    def keepalive_s(self) -> float | None:
        """How often a waiting stream sends a comment line (None: not waiting)."""
        return KEEPALIVE_S if self.waiting else None

    async def settle(self, within_s: float) -> None:
        """Wait up to ``within_s`` for the stay to end (a worker came, or it expired)."""
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=within_s)

    async def before_stream(self, obs: Any) -> None:
        """Hold a waiting stream's headers up to ``KEEPALIVE_S``: expired by then, the request
        gets its 503 as a status (``obs`` is told it failed), else the stream opens."""
        if not self.waiting:
            return
        await self.settle(KEEPALIVE_S)
        if (expired := self.expired) is not None:
            obs.finished(ok=False)
            raise expired

    def close(self) -> None:
        """The request is over: stop watching (a job still queued stays queued)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def around(self, work: Awaitable[T]) -> T:
        try:
            return await work
        finally:
            self.close()

    async def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in stream:
                yield chunk
        finally:
            self.close()


class WaitingRoom:
    """One per API process (``waiting_room_of``)."""

    def __init__(self, state: Any, settings: Settings, poll_s: float = POLL_S) -> None:
        self.state = state
        self.bound_s = settings.api.waiting_room_seconds
        self.stream_ttl_s = settings.jobs.stream_ttl_seconds
        self.poll_s = poll_s

    async def enter(self, job_id: uuid.UUID, model: str,
                    on_expired: Callable[[], Awaitable[None]] | None = None) -> Watch:
        """Watch the request's job if no live worker serves ``model`` now (from the catalog's
        cached list: no I/O when one does); ``on_expired`` runs once its job has ended."""
        if self.bound_s <= 0 or await self.state.catalog.serves(model):
            return Watch()
        log.info("waiting for a worker", extra={"job_id": str(job_id), "model": model})
        task = asyncio.create_task(self._stay(job_id, model, on_expired))
        task.add_done_callback(_log_failure)
        return Watch(task)

    async def _stay(self, job_id: uuid.UUID, model: str,
                    on_expired: Callable[[], Awaitable[None]] | None) -> APIError | None:
        """The error once the job ended unserved; None when a worker came for it."""
        give_up = time.monotonic() + self.bound_s
        while (left := give_up - time.monotonic()) > 0:
            await asyncio.sleep(min(self.poll_s, left))
            if await self._served(model):
                return None
        if await self._served(model):
            return None
        message = unavailable_message(model, self.bound_s)
        if not await self._end(job_id, model, message):
            return None
        if on_expired is not None:
            await on_expired()
        return unavailable_error(message)

    async def _served(self, model: str) -> bool:
        try:
            served: bool = await self.state.catalog.serves(model, fresh=True)
            return served
        except Exception:  # Redis away: look again at the next poll
            log.warning("waiting room: the worker list could not be read", exc_info=True)
            return False

    async def _end(self, job_id: uuid.UUID, model: str, message: str) -> bool:
        """End the job if it is still queued; False if it is not (a worker has it)."""
        error = {"status": 503, "code": UNAVAILABLE, "message": message,
                 "retry_after": RETRY_AFTER_S}
        async with self.state.sessionmaker() as session:
            row = (await session.execute(lifecycle.reject(
                job_id, error=error, now=dt.datetime.now(dt.UTC)))).first()
            if row is None:
                await session.rollback()
                return False
            await session.execute(*wakeups.notify(wakeups.JobCancelled(job_id)))
            await record_response_end_async(session, row)
            await session.commit()
        log.info("no worker came: the waiting request ends",
                 extra={"job_id": str(job_id), "model": model})
        key = stream_key(job_id)
        async with self.state.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(key, fields(Failure(0, 503, UNAVAILABLE, message,
                                          retry_after=RETRY_AFTER_S)))
            pipe.expire(key, self.stream_ttl_s)
            await pipe.execute()
        return True


def _log_failure(task: asyncio.Task[APIError | None]) -> None:
    """A stay that failed (Postgres or Redis away at its end) leaves the job queued and the
    request waiting on its relay, as any queued job: say so, once."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("waiting room: ending an unserved job failed", exc_info=exc)


def waiting_room_of(state: Any) -> WaitingRoom:
    """The app's waiting room, made on first use."""
    room: WaitingRoom | None = getattr(state, "waiting_room", None)
    if room is None:
        room = state.waiting_room = WaitingRoom(state, state.settings)
    return room
