"""The express path at the API: a realtime job placed on its worker at insert with a ticket
the dispatcher lent (scheduler.policies.express), and handed to that worker's stream by the
API itself, so its first token does not wait for the NOTIFY, the dispatcher's read, its pass
and its claim (issue #16; docs/jobs.md, "The express path").

What stays as on the dispatcher's path: the row is committed before anything reaches the
client (the insert creates it assigned, leased, attempt 1; the hand-off entry goes out
alongside the insert and the worker's claim waits for the row), the worker starts it only
through ``start`` for that attempt, and a hand-off that never arrives (the API died in
between) re-runs the job when its lease runs out. A hand-off Redis refuses gives the job back
to the dispatcher at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from service.store import handoff, keys, lifecycle, tracing, wakeups
from service.store.detached import run_detached
from service.store.job_queries import prompt_shape
from service.store.keys import (
    EXPRESS_LIST_TTL_MS,
    HANDOFF_MAXLEN,
    express_key,
    handoff_stream,
)
from service.store.models.jobs import Job
from service.store.outages import is_outage
from service.store.settings import Settings

log = logging.getLogger("fairway.jobs")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Express:
    """What the insert needs to try the express path: the API's Redis, the claim's lease, and
    what the dispatcher's view of the job needs that the row holds only through joins (the
    tenant's weight, its tier's TTFT target; carried in the NOTIFY, wakeups.PlacedView)."""

    redis: Redis
    lease_s: float
    tenant_weight: float = 1.0
    ttft_target_s: float | None = None


def express_for(redis: Redis, settings: Settings, *, tenant_weight: float,
                ttft_target_s: float) -> Express | None:
    """None when the deployment lends no tickets (``FAIRWAY_EXPRESS_TICKETS=0``): no Redis
    read per request for a path that cannot be taken. ``ttft_target_s``: the tier's, 0 for
    none (as the tier row says)."""
    if settings.dispatcher.express_tickets < 1:
        return None
    return Express(redis, settings.jobs.lease_seconds, float(tenant_weight),
                   ttft_target_s or None)


@dataclass(frozen=True, slots=True)
class Ticket:
    worker_id: str
    ticket: str  # the lender's id for it, echoed in the NOTIFY (the dispatcher's accounting)


def decode_ticket(raw: bytes | str) -> Ticket | None:
    parts = keys.decode_ticket(raw)
    return Ticket(*parts) if parts else None


async def take_ticket(express: Express, model: str) -> Ticket | None:
    """One lent ticket for ``model``, or None: none lent now (the queue is not empty, no room,
    the feature is off) or Redis is away (the job then goes the dispatcher's way)."""
    return await _pop_ticket(express.redis, model)


async def _pop_ticket(redis: Redis, model: str) -> Ticket | None:
    try:
        raw: bytes | str | None = await redis.lpop(express_key(model))  # type: ignore[assignment]
    except Exception as exc:
        if not is_outage(exc):
            raise
        return None
    return decode_ticket(raw) if raw else None


# Puts a ticket back at the head of its list; a list that the pop emptied (and so deleted)
# gets the lender's TTL again, so a ticket never outlives a dispatcher that stopped lending.
_GIVE_BACK = """
redis.call('LPUSH', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


class EarlyTicket:
    """A ticket taken while the door's quota script runs, the two Redis round trips at once
    rather than one after the other (issue #16: each is a wake-up of Redis on a quiet box).
    The insert uses it (``create_job(early=...)``); a request refused or not placed at insert
    gives it back, so refusals take no room from anyone's express path."""

    def __init__(self, redis: Redis, model: str) -> None:
        self._redis, self._model = redis, model
        self._taking: asyncio.Future[Ticket | None] = asyncio.ensure_future(
            _pop_ticket(redis, model))

    async def take(self) -> Ticket | None:
        """The ticket (None: none was lent, or Redis was away), now the caller's to use."""
        try:
            return await self._taking
        except Exception:  # not an outage (those give None): the job goes the dispatcher's way
            log.exception("taking an express ticket failed")
            return None

    def give_back(self) -> None:
        """Return the ticket, in the background (the caller may be mid-cancellation)."""
        run_detached(self._give_back())

    async def _give_back(self) -> None:
        ticket = await self.take()
        if ticket is None:
            return
        try:
            await self._redis.eval(_GIVE_BACK, 1, express_key(self._model),
                                   keys.encode_ticket(ticket.worker_id, ticket.ticket),
                                   EXPRESS_LIST_TTL_MS)
        except Exception as exc:  # the lender forgets it after TAKEN_FORGET_S
            if not is_outage(exc):
                log.exception("giving an express ticket back failed")


def placed_wakeup(job: Job, ticket: Ticket, express: Express) -> wakeups.JobPlaced:
    """The NOTIFY of a placed job, with the dispatcher's view of it: as the dispatcher would
    read it from the row (the body as stored)."""
    estimate, prefix_key, prefix_tokens = prompt_shape(job.request)
    view = wakeups.PlacedView(
        job.tenant_id, express.tenant_weight, job.priority, job.model, time.time(),
        job.deadline_at.timestamp() if job.deadline_at else None, job.max_tokens, estimate,
        prefix_key, prefix_tokens, express.ttft_target_s, job.attempt)
    return wakeups.JobPlaced(job.id, ticket.worker_id, ticket.ticket, tracing.traceparent(),
                             view)


async def insert_and_hand_off(express: Express, session: AsyncSession, job: Job,
                              insert: Callable[[], Awaitable[T]]) -> T:
    """Run ``insert`` (the placed row and its NOTIFY, committed) with the job's hand-off
    entry sent alongside it, not after the commit: the worker tokenizes and prefills while
    the row commits, and its claim waits for the row (the entry is marked ``ahead``,
    worker.claim_ahead), so nothing of the job leaves the worker before the commit. An insert
    that fails leaves an entry whose row never appears: the worker gives it up and aborts
    its engine request. A hand-off Redis refuses gives the committed job back to the
    dispatcher."""
    sending = asyncio.ensure_future(_send_handoff(express, job))
    # One turn of the loop for the hand-off to run up to its XADD's send (its first wait),
    # so the entry is on the wire before the insert builds and sends its statement: the
    # worker's engine starts ~0.5 ms sooner on this box (issue #16, idle TTFT).
    try:
        await asyncio.sleep(0)
        result = await insert()
    except BaseException:
        sending.cancel()
        await asyncio.wait([sending])
        raise
    if not await sending:
        await give_back(session, job)
    return result


async def _send_handoff(express: Express, job: Job) -> bool:
    """True once the entry is in the worker's stream; False if Redis refused it."""
    assert job.worker_id is not None
    body = handoff.carried_body(job.endpoint, job.request, max_tokens=job.max_tokens,
                                priority=job.priority, tenant_id=str(job.tenant_id))
    with tracing.span("fairway.api.handoff", attributes={"fairway.job_id": str(job.id),
                                                         "fairway.worker_id": job.worker_id}):
        entry = handoff.encode(handoff.Handoff(str(job.id), job.attempt,
                                               tracing.inject() or None, body, ahead=True))
        try:
            await express.redis.xadd(handoff_stream(job.worker_id), entry,  # type: ignore[arg-type]
                                     maxlen=HANDOFF_MAXLEN, approximate=True)
            return True
        except Exception as exc:
            if not is_outage(exc):
                log.exception("express hand-off failed; queuing the job",
                              extra={"job_id": str(job.id)})
            else:
                log.warning("express hand-off failed (Redis away); queuing the job",
                            extra={"job_id": str(job.id)})
            return False


async def give_back(session: AsyncSession, job: Job) -> None:
    """assigned -> queued, and the dispatcher told (if the worker has not started it
    meanwhile: then it runs there, and nothing changes). Should this process die between the
    two, the dispatcher's rescan finds the queued job."""
    assert job.worker_id is not None
    now = dt.datetime.now(dt.UTC)
    returned = (await session.execute(lifecycle.unclaim(
        job.id, attempt=job.attempt, worker_id=job.worker_id, now=now))).first()
    if returned is not None:
        await session.execute(*wakeups.notify(wakeups.JobQueued(job.id)))
    await session.commit()
