"""Follow a job's Redis Stream and yield what the client has not seen yet."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from service.store.job_stream import Entry, Failure, Final, parse
from service.store.keys import stream_key
from service.store.outages import is_outage


@dataclass(frozen=True, slots=True)
class NewText:
    """Text the client has not seen yet (a resumed or re-run attempt's repeat is cut off)."""

    text: str


@dataclass(frozen=True, slots=True)
class TimedOut:
    """Nothing final arrived within the request's timeout."""


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The relay cannot give the client the whole answer: Redis stayed away too long, or part
    of the stream was lost (a Redis restart without its data). The job itself goes on; its
    result can be fetched by id."""

    reason: str


RelayEvent = NewText | Final | Failure | TimedOut | Interrupted

OUTAGE_PATIENCE_S = 30.0  # how long the relay waits for Redis to come back


class ClientGone(Exception):
    """The HTTP client disconnected while we were waiting for the job."""


async def follow_job(
    redis: Redis,
    job_id: uuid.UUID,
    *,
    timeout_s: float,
    is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    block_ms: int = 1000,
    outage_patience_s: float = OUTAGE_PATIENCE_S,
) -> AsyncIterator[RelayEvent]:
    """Yields new text, then one Final or Failure (or TimedOut, or Interrupted).

    A Redis outage is waited out (up to ``outage_patience_s``): reading resumes after the last
    entry seen, so the client gets every entry once Redis is back.

    A re-run attempt regenerates from its first token (or its checkpoint); text up to what was
    already sent is dropped, which is exact for deterministic (greedy or seeded) decoding.
    """
    key = stream_key(job_id)
    last_id: bytes | str = "0-0"
    sent = 0
    produced: dict[int, int] = {}  # attempt -> characters that attempt has produced
    give_up = time.monotonic() + timeout_s
    outage_since: float | None = None
    failures = 0
    while True:
        try:
            batch = cast(list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]],
                         await redis.xread({key: last_id}, count=256, block=block_ms))
            outage_since, failures = None, 0
        except Exception as exc:
            if not is_outage(exc):
                raise
            now = time.monotonic()
            outage_since = outage_since or now
            if now - outage_since > outage_patience_s or now > give_up:
                yield Interrupted("Lost the connection to the job's progress (Redis is "
                                  "unavailable).")
                return
            failures += 1
            await asyncio.sleep(min(2.0, 0.1 * 2 ** failures))
            continue
        if not batch:
            if is_disconnected is not None and await is_disconnected():
                raise ClientGone
            if time.monotonic() > give_up:
                yield TimedOut()
                return
            continue
        for entry_id, raw in batch[0][1]:
            last_id = entry_id
            entry: Entry | None = parse(raw)
            if isinstance(entry, Final | Failure):
                yield entry
                return
            if entry is None or entry.attempt < max(produced, default=0):
                continue  # junk, or a stale attempt (a worker taken for dead, still talking)
            # Workers send the delta's character offset in the whole output; a resumed
            # attempt starts after its checkpoint, a re-run from zero.
            start = entry.offset if entry.offset is not None else produced.get(entry.attempt, 0)
            if entry.attempt in produced and start > produced[entry.attempt]:
                # One attempt's offsets are contiguous: entries between were lost (a Redis
                # restart without its data), and the text cannot be made whole.
                yield Interrupted("Part of the answer's stream was lost.")
                return
            end = start + len(entry.text)
            produced[entry.attempt] = end
            if end > sent:
                yield NewText(entry.text[max(0, sent - start):])
                sent = end
