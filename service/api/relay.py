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

# A final job as its row in Postgres says: its whole text, and its end as the stream's last
# entry would have said it (service.jobs.service.job_outcome).
Settled = tuple[str, Final | Failure]

OUTAGE_PATIENCE_S = 30.0  # how long the relay waits for Redis to come back
# After this long without a stream entry, and as often while it lasts, the relay reads the
# job's row: a job can be final with its stream's end never written (the worker died after its
# final write, its stream outbox lost), and Postgres, not the stream, is the truth.
SETTLE_CHECK_S = 5.0


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
    settled: Callable[[], Awaitable[Settled | None]] | None = None,
    settle_check_s: float = SETTLE_CHECK_S,
) -> AsyncIterator[RelayEvent]:
    """Yields new text, then one Final or Failure (or TimedOut, or Interrupted).

    A Redis outage is waited out (up to ``outage_patience_s``): reading resumes after the last
    entry seen, so the client gets every entry once Redis is back.

    ``settled`` reads the job's row: None while it is active. After ``settle_check_s`` without
    an entry (Redis away included), and every ``settle_check_s`` while that lasts, a final row
    ends the relay with the text not yet sent and the row's end.

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
    quiet_since = last_check = time.monotonic()

    async def row_says() -> Settled | None:
        """The job's row, if it is time to read it (and it can be read)."""
        nonlocal last_check
        now = time.monotonic()
        if settled is None or min(now - quiet_since, now - last_check) < settle_check_s:
            return None
        last_check = now
        try:
            return await settled()
        except Exception as exc:
            if not is_outage(exc):
                raise
            return None  # Postgres away too: the stream may still bring the end

    while True:
        try:
            batch = cast(list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]],
                         await redis.xread({key: last_id}, count=256, block=block_ms))
            outage_since, failures = None, 0
        except Exception as exc:
            if not is_outage(exc):
                raise
            if (outcome := await row_says()) is not None:
                for event in _from_row(outcome, sent):
                    yield event
                return
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
            if (outcome := await row_says()) is not None:
                for event in _from_row(outcome, sent):
                    yield event
                return
            if is_disconnected is not None and await is_disconnected():
                raise ClientGone
            if time.monotonic() > give_up:
                yield TimedOut()
                return
            continue
        quiet_since = time.monotonic()
        for entry_id, raw in batch[0][1]:
            last_id = entry_id
            entry: Entry | None = parse(raw)
            if isinstance(entry, Final | Failure):
                yield entry
                return
            if entry is None:
                continue
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


def _from_row(outcome: Settled, sent: int) -> list[RelayEvent]:
    """The end of a relay read from the job's row: the text not yet sent, then the end."""
    text, end = outcome
    rest = text[sent:] if isinstance(end, Final) else ""
    return [NewText(rest), end] if rest else [end]
