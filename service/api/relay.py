"""Follow a job's Redis Stream and yield what the client has not seen yet."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis

from service.store.keys import decode_fields, stream_key


@dataclass(slots=True)
class RelayEvent:
    type: str  # "delta" | "final" | "error" | "timeout"
    text: str = ""
    fields: dict[str, str] = field(default_factory=dict)


class ClientGone(Exception):
    """The HTTP client disconnected while we were waiting for the job."""


async def follow_job(
    redis: Redis,
    job_id: uuid.UUID,
    *,
    timeout_s: float,
    is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    block_ms: int = 1000,
) -> AsyncIterator[RelayEvent]:
    """Yields deltas, then one final/error event (or a timeout event).

    A re-run attempt regenerates from its first token (or its checkpoint); text up to what was
    already sent is dropped, which is exact for deterministic (greedy or seeded) decoding.
    """
    key = stream_key(job_id)
    last_id = "0-0"
    sent = 0
    produced: dict[int, int] = {}  # attempt -> characters that attempt has produced
    give_up = time.monotonic() + timeout_s
    while True:
        batch = await redis.xread({key: last_id}, count=256, block=block_ms)
        if not batch:
            if is_disconnected is not None and await is_disconnected():
                raise ClientGone
            if time.monotonic() > give_up:
                yield RelayEvent("timeout")
                return
            continue
        for entry_id, raw in batch[0][1]:
            last_id = entry_id
            ev = decode_fields(raw)
            if ev["type"] != "delta":
                yield RelayEvent(ev["type"], fields=ev)
                return
            attempt = int(ev.get("attempt", 0))
            text = ev.get("text", "")
            # Workers send the delta's character offset in the whole output; a resumed
            # attempt starts after its checkpoint, a re-run from zero.
            start = int(ev["offset"]) if "offset" in ev else produced.get(attempt, 0)
            end = start + len(text)
            produced[attempt] = end
            if end > sent:
                yield RelayEvent("delta", text[max(0, sent - start):])
                sent = end
