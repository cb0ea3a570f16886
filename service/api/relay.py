"""Follow a job for its HTTP request: its Redis Stream, yielding what the client has not seen
yet (``follow_job``), with the job's row as the fallback; and, for every route that answers
with a job's result (chat and text completions, responses), the wait itself, the errors a
job's end becomes, and cancelling the job when its client leaves. The routes only shape the
finished row."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from fastapi import Request
from opentelemetry.trace import Span
from redis.asyncio import Redis

from service.jobs.job_records import cancel_job, job_outcome
from service.store import tracing
from service.store.job_stream import Delta, Entry, Failure, Final, parse
from service.store.keys import stream_key
from service.store.models.jobs import Job
from service.store.outages import is_outage
from service.store.settings import Settings
from service.web.errors import APIError


@dataclass(frozen=True, slots=True)
class NewText:
    """Text the client has not seen yet (a resumed or re-run attempt's repeat is cut off);
    the job's first carries the worker's traceparent when tracing is on."""

    text: str
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class TimedOut:
    """Nothing final arrived within the request's timeout."""


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The relay cannot give the client the whole answer: Redis stayed away too long, or part
    of the stream was lost (a Redis restart without its data). The job itself goes on; its
    result can be fetched by id."""

    reason: str


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing came for ``keepalive_s``: a stream may send a comment line, so that the client
    and any balancer between see the connection alive (the waiting room)."""


RelayEvent = NewText | Final | Failure | TimedOut | Interrupted | KeepAlive
RELAY_SPAN = "fairway.api.relay"


def relay_span(event: NewText) -> Span | None:
    """The relay hop of a traced job (its first text carries the worker's traceparent): from
    the stream entry to its text written to the client; the caller ends it once written
    (``tracing.end``). None for every other text, and while tracing is off."""
    if event.traceparent is None:
        return None
    return tracing.start_span(RELAY_SPAN, parent=tracing.extract_traceparent(event.traceparent))

# A final job as its row in Postgres says: its whole text, and its end as the stream's last
# entry would have said it (service.jobs.job_records.job_outcome).
Settled = tuple[str, Final | Failure]

OUTAGE_PATIENCE_S = 30.0  # how long the relay waits for Redis to come back
# After this long without a stream entry, and as often while it lasts, the relay reads the
# job's row: a job can be final with its stream's end never written (the worker died after its
# final write, its stream outbox lost), and Postgres, not the stream, is the truth.
SETTLE_CHECK_S = 5.0
ROW_CHECK_MAX_GAP = 4  # the longest gap between such reads, in SETTLE_CHECK_S


@dataclass(frozen=True, slots=True)
class RelayPace:
    """How the relay waits: one stream read's block, how long it rides out a Redis outage,
    and how often a silent stream sends it to the job's row (tests shorten them)."""
    block_ms: int = 1000
    outage_patience_s: float = OUTAGE_PATIENCE_S
    settle_check_s: float = SETTLE_CHECK_S


class ClientGone(Exception):
    """The HTTP client disconnected while we were waiting for the job."""


async def follow_job(
    redis: Redis,
    job_id: uuid.UUID,
    *,
    timeout_s: float,
    is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    settled: Callable[[], Awaitable[Settled | None]] | None = None,
    on_quota_settled: Callable[[], None] | None = None,
    pace: RelayPace = RelayPace(),
    keepalive_s: float | None = None,
) -> AsyncIterator[RelayEvent]:
    """Yields new text, then one Final or Failure (or TimedOut, or Interrupted); with
    ``keepalive_s``, a KeepAlive after each such stretch with nothing else to yield.

    A Redis outage is waited out (up to ``pace.outage_patience_s``): reading resumes after the last
    entry seen, so the client gets every entry once Redis is back.

    ``settled`` reads the job's row: None while it is active. After ``pace.settle_check_s``
    without an entry (Redis away included), and as often while that lasts, a final row
    ends the relay with the text not yet sent and the row's end.

    ``on_quota_settled`` is called before a Final whose worker settled the job's quota
    (``Final.settled``; ``Admission.settled_by_worker``).
    """
    reader = _StreamReader(redis, stream_key(job_id), pace.block_ms)
    splice = _Splice()
    row = _RowCheck(settled, pace.settle_check_s)
    give_up = time.monotonic() + timeout_s
    outage_since: float | None = None
    failures = 0
    last_yield = time.monotonic()
    while True:
        entries = await reader.read()
        if not entries and (outcome := await row.due()) is not None:
            for ending in _from_row(outcome, splice.sent):
                yield ending
            return
        if entries is None:  # Redis is away
            now = time.monotonic()
            outage_since = outage_since or now
            if now - outage_since > pace.outage_patience_s or now > give_up:
                yield Interrupted("Lost the connection to the job's progress (Redis is "
                                  "unavailable).")
                return
            failures += 1
            await asyncio.sleep(min(2.0, 0.1 * 2 ** failures))
            continue
        outage_since, failures = None, 0
        if not entries:
            if is_disconnected is not None and await is_disconnected():
                raise ClientGone
            if time.monotonic() > give_up:
                yield TimedOut()
                return
            if keepalive_s is not None and time.monotonic() - last_yield >= keepalive_s:
                last_yield = time.monotonic()
                yield KeepAlive()
            continue
        last_yield = time.monotonic()
        row.heard()
        for entry in entries:
            if isinstance(entry, Final | Failure):
                if isinstance(entry, Final) and entry.settled and on_quota_settled is not None:
                    on_quota_settled()
                yield entry
                return
            event = splice.add(entry)
            if event is not None:
                yield event
                if isinstance(event, Interrupted):
                    return


class _StreamReader:
    """Reads a job's stream from where it left off."""

    def __init__(self, redis: Redis, key: str, block_ms: int) -> None:
        self.redis, self.key, self.block_ms = redis, key, block_ms
        self.last_id: bytes | str = "0-0"

    async def read(self) -> list[Entry] | None:
        """The next entries ([] after ``block_ms`` with none; junk skipped), or None when
        Redis cannot be reached."""
        try:
            batch = cast(list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]],
                         await self.redis.xread({self.key: self.last_id}, count=256,
                                                block=self.block_ms))
        except Exception as exc:
            if not is_outage(exc):
                raise
            return None
        entries = []
        for entry_id, raw in batch[0][1] if batch else ():
            self.last_id = entry_id
            if (entry := parse(raw)) is not None:
                entries.append(entry)
        return entries


class _RowCheck:
    """When to read the job's row: after ``every_s`` without a stream entry, then at gaps
    doubling up to ROW_CHECK_MAX_GAP times that while the quiet lasts. A job queued behind a
    flood is silent until it starts: read every ``every_s``, 56 such streams cost the API
    about 2% of a core in Postgres reads on a 2-core box, taken from the engine beside it."""

    def __init__(self, settled: Callable[[], Awaitable[Settled | None]] | None,
                 every_s: float) -> None:
        self.settled, self.every_s = settled, every_s
        self.quiet_since = self.last_check = time.monotonic()
        self.gap_s = every_s

    def heard(self) -> None:
        self.quiet_since = time.monotonic()
        self.gap_s = self.every_s

    async def due(self) -> Settled | None:
        now = time.monotonic()
        if self.settled is None or now - self.quiet_since < self.every_s \
                or now - self.last_check < self.gap_s:
            return None
        self.last_check = now
        self.gap_s = min(2 * self.gap_s, ROW_CHECK_MAX_GAP * self.every_s)
        try:
            return await self.settled()
        except Exception as exc:
            if not is_outage(exc):
                raise
            return None  # Postgres away too: the stream may still bring the end


class _Splice:
    """Turns the deltas of one or more attempts into the text the client has not seen yet.

    A re-run attempt regenerates from its first token (or its checkpoint); text up to what was
    already sent is dropped, which is exact for deterministic (greedy or seeded) decoding."""

    def __init__(self) -> None:
        self.sent = 0  # characters given to the client
        self.produced: dict[int, int] = {}  # attempt -> characters that attempt has produced

    def add(self, delta: Delta) -> NewText | Interrupted | None:
        if delta.attempt < max(self.produced, default=0):
            return None  # a stale attempt (a worker taken for dead, still talking)
        # Workers send the delta's character offset in the whole output; a resumed attempt
        # starts after its checkpoint, a re-run from zero.
        start = delta.offset
        if delta.attempt in self.produced and start > self.produced[delta.attempt]:
            # One attempt's offsets are contiguous: entries between were lost (a Redis restart
            # without its data), and the text cannot be made whole.
            return Interrupted("Part of the answer's stream was lost.")
        end = start + len(delta.text)
        self.produced[delta.attempt] = end
        if end <= self.sent:
            return None
        text = delta.text[max(0, self.sent - start):]
        self.sent = end
        return NewText(text, delta.traceparent)


def _from_row(outcome: Settled, sent: int) -> list[RelayEvent]:
    """The end of a relay read from the job's row: the text not yet sent, then the end."""
    text, end = outcome
    rest = text[sent:] if isinstance(end, Final) else ""
    return [NewText(rest), end] if rest else [end]


# -- waiting on a job from its request ----------------------------------------------------------
log = logging.getLogger("fairway.api")


async def wait_for_job(request: Request, job_id: uuid.UUID, settings: Settings,
                       obs: Any, on_settled: Callable[[], None] | None = None) -> Job:
    """The finished job's row; its failure as its HTTP error. A client that leaves, or a
    timeout, cancels the job (its engine slot is freed). ``on_settled``: called when the
    job's end says its worker settled the quota (``Admission.settled_by_worker``)."""
    state = request.app.state
    try:
        async for ev in follow_job(state.redis, job_id,
                                   timeout_s=settings.api.request_timeout_seconds,
                                   is_disconnected=request.is_disconnected,
                                   settled=row_reader(state, job_id),
                                   on_quota_settled=on_settled):
            if isinstance(ev, NewText):
                obs.first_token()
            elif isinstance(ev, Final):
                job = await final_row(state, job_id)
                obs.finished(ok=True, completion_tokens=job.completion_tokens or 0)
                return job
            elif isinstance(ev, Failure):
                obs.finished(ok=False)
                raise job_error(ev)
            elif isinstance(ev, Interrupted):  # the job goes on; its result stays fetchable
                obs.finished(ok=False)
                raise interrupted_error(ev, job_id)
            else:
                obs.finished(ok=False)
                await cancel_for_client(state, job_id)
                raise APIError(504, "The request timed out before the job finished.",
                               code="timeout")
    except ClientGone:
        await cancel_for_client(state, job_id)
        raise
    raise APIError(500, "The job's event stream ended unexpectedly.", code="internal_error")


async def final_row(state: Any, job_id: uuid.UUID) -> Job:
    async with state.sessionmaker() as session:
        job: Job | None = await session.get(Job, job_id)
    assert job is not None  # the worker writes the row before the final event
    return job


def row_reader(state: Any, job_id: uuid.UUID) -> Callable[[], Awaitable[Settled | None]]:
    """The relay's fallback: the job's end as its row says, when the stream does not say it."""
    async def read() -> Settled | None:
        async with state.sessionmaker() as session:
            job = await session.get(Job, job_id)
        return job_outcome(job) if job is not None else None
    return read


async def cancel_for_client(state: Any, job_id: uuid.UUID) -> None:
    try:
        async with state.sessionmaker() as session:
            if await cancel_job(session, state.redis, job_id=job_id):
                log.info("job cancelled: client disconnected", extra={"job_id": str(job_id)})
    except Exception:  # never let cleanup crash the server; the lease expiry is the backstop
        log.exception("cancelling job failed", extra={"job_id": str(job_id)})


def interrupted_error(ev: Interrupted, job_id: uuid.UUID) -> APIError:
    return APIError(503, f"{ev.reason} The request is still being processed: fetch its result "
                         f"with GET /v1/jobs/job_{job_id.hex}.", code="stream_interrupted",
                    headers={"Retry-After": "2"})


# What a request still waiting on a job gets when the job is cancelled (by its owner, or a
# batch or admin cancel). Not a 409: the openai SDKs resend 408, 409, 429 and 5xx by default,
# which would run the cancelled request again under a new id and bill it twice. A 400 is not
# retried, and x-should-retry: false says so to any SDK that reads it.
CANCELLED_STATUS = 400
CANCELLED_CODE = "request_cancelled"


def job_error(failure: Failure) -> APIError:
    if failure.code == "cancelled":  # the job row keeps "cancelled" (the jobs API's code)
        return APIError(CANCELLED_STATUS, failure.message, code=CANCELLED_CODE,
                        headers={"x-should-retry": "false"})
    headers = ({"Retry-After": str(failure.retry_after)} if failure.retry_after is not None
               else None)
    return APIError(failure.status, failure.message, code=failure.code, param=failure.param,
                    headers=headers)
