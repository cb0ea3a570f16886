"""Delivery of jobs' stream entries (service.store.job_stream) that survives Redis being away.

Entries go to Redis at once while it is up, the entries of every job that has one in the
same turn of the event loop (an engine step hands each running job its tokens at once) in
one pipeline: one round trip for the step, not one per job. When a write fails
with an outage, that job's entries wait here in order (consecutive deltas of one attempt
merged, so a long outage costs one entry per job, not one per token) and a background task
delivers them once Redis is back: generation never stops for Redis, and a reader that
reconnects gets every entry, in order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque

from redis.asyncio import Redis

from service.store import job_stream
from service.store.keys import stream_key
from service.store.outages import DependencyState, is_outage

log = logging.getLogger("fairway.worker")


class StreamOutbox:
    def __init__(self, redis: Redis, *, ttl_s: int, state: DependencyState,
                 retry_s: float = 0.5) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.state = state  # the worker's view of Redis: logs an outage once
        self.retry_s = retry_s
        self._pending: dict[uuid.UUID, deque[job_stream.Entry]] = {}
        self._wake = asyncio.Event()
        # Entries of this turn of the loop, sent together at its end (``_send_group``).
        self._group: list[tuple[uuid.UUID, job_stream.Entry, asyncio.Future[None]]] = []

    @property
    def pending_jobs(self) -> int:
        return len(self._pending)

    async def put(self, job_id: uuid.UUID, entry: job_stream.Entry) -> None:
        """Deliver now if nothing of this job's is waiting, else queue behind it. Never raises
        for an outage."""
        queue = self._pending.get(job_id)
        if queue is None:
            try:
                await self._write(job_id, entry)
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                self.state.failed(exc)
                queue = self._pending[job_id] = deque()
                self._wake.set()
        _append(queue, entry)

    async def expire_unended(self, job_id: uuid.UUID) -> None:
        """Give a stream this worker wrote to but will not end (an express job's first token
        sent before a claim that failed: claimed_job.may_send_unconfirmed) the TTL its end
        would have set, unless it has one. Best effort: Redis away leaves it as it was."""
        key = stream_key(job_id)
        self._pending.pop(job_id, None)  # nobody reads it: nothing waiting is worth sending
        try:
            if await self.redis.ttl(key) == -1:  # -1: no TTL; -2: no stream at all
                await self.redis.expire(key, self.ttl_s)
        except Exception as exc:
            if not is_outage(exc):
                raise
            self.state.failed(exc)

    async def deliver_forever(self) -> None:
        """The background task: retry what waits, oldest first per job, until delivered."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.retry_s)
            if await self._flush():
                self._wake.clear()

    async def _flush(self) -> bool:
        """True when nothing is left waiting."""
        for job_id in list(self._pending):
            queue = self._pending[job_id]
            while queue:
                try:
                    await self._write(job_id, queue[0])
                except Exception as exc:
                    if not is_outage(exc):
                        log.exception("dropping an undeliverable stream entry",
                                      extra={"job_id": str(job_id)})
                        queue.popleft()
                        continue
                    self.state.failed(exc)
                    return False
                queue.popleft()
            del self._pending[job_id]
        self.state.ok()
        return True

    async def _write(self, job_id: uuid.UUID, entry: job_stream.Entry) -> None:
        """Write one entry, in the pipeline of this turn's entries; raises what its command
        (or the whole pipeline, for an outage) raised."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._group:  # the first of this turn: send once the others had their turn
            asyncio.get_running_loop().call_soon(self._send_soon)
        self._group.append((job_id, entry, future))
        await future

    def _send_soon(self) -> None:
        group, self._group = self._group, []
        task = asyncio.create_task(self._send_group(group))
        _sending.add(task)
        task.add_done_callback(_sending.discard)

    async def _send_group(
            self, group: list[tuple[uuid.UUID, job_stream.Entry, asyncio.Future[None]]]) -> None:
        spans: list[tuple[asyncio.Future[None], int, int]] = []  # (future, first, last command)
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id, entry, future in group:
                    key, first = stream_key(job_id), len(pipe)
                    pipe.xadd(key, job_stream.fields(entry))
                    if not isinstance(entry, job_stream.Delta):  # the end: expire the stream
                        pipe.expire(key, self.ttl_s)
                    spans.append((future, first, len(pipe)))
                results = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:  # the worker is stopping: so are its writers
            for _, _, future in group:
                future.cancel()
            raise
        except Exception as exc:  # the whole pipeline failed (an outage): every entry with it
            for _, _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, first, last in spans:
            error = next((r for r in results[first:last] if isinstance(r, Exception)), None)
            if future.done():  # its writer was cancelled meanwhile
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)


# Group sends in flight: the loop keeps only weak references to tasks.
_sending: set[asyncio.Task[None]] = set()


def _append(queue: deque[job_stream.Entry], entry: job_stream.Entry) -> None:
    """Queue ``entry``; a delta that continues the last waiting delta is merged into it."""
    last = queue[-1] if queue else None
    if (isinstance(entry, job_stream.Delta) and isinstance(last, job_stream.Delta)
            and last.attempt == entry.attempt and last.offset is not None
            and entry.offset == last.offset + len(last.text)):
        queue[-1] = job_stream.followed_by(last, entry)
        return
    queue.append(entry)
