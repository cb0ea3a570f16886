"""The express path at the API: a realtime job placed on its worker with a ticket the
dispatcher lent (scheduler.policies.express_grants), and handed to that worker's stream by the API
itself, so its first token does not wait for the NOTIFY, the dispatcher's read, its pass and
its claim (docs/architecture.md, "The express path").

The door's quota script does it on admission, in the same Redis call (``door_entry``,
``quota_scripts.ADMIT_AND_HAND_OFF``): it pops the model's next ticket and adds the job's
hand-off entry to that worker's stream, so the worker tokenizes and prefills while the API
inserts the row. What stays as on the dispatcher's path: the row is committed before anything
reaches the client (the insert creates it assigned to that worker, leased, attempt 1; the
entry is marked ``ahead`` and the worker's claim waits for the row, worker.claim_ahead), the
worker starts it only through ``start`` for that attempt, and a row that never appears (the
insert failed, or the API died before its commit) leaves the worker to give the entry up and
abort its engine request; a row that commits later than that is re-run at its lease's end.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from service.jobs.door_request import DoorRequest
from service.store import handoff, keys, tracing, wakeups
from service.store.job_queries import prompt_shape
from service.store.models.jobs import Job
from service.store.settings import Settings


@dataclass(frozen=True, slots=True)
class Ticket:
    worker_id: str
    ticket: str  # the lender's id for it, echoed in the NOTIFY (the dispatcher's accounting)


def decode_ticket(raw: bytes | str | None) -> Ticket | None:
    parts = keys.decode_ticket(raw) if raw else None
    return Ticket(*parts) if parts else None


@dataclass(frozen=True, slots=True)
class Express:
    """What the insert of a job the door placed needs: the ticket it was placed with, the
    claim's lease, and what the dispatcher's view of the job needs that the row holds only
    through joins (the tenant's weight, its plan's TTFT target; carried in the NOTIFY,
    wakeups.PlacedView)."""

    ticket: Ticket
    lease_s: float
    tenant_weight: float = 1.0
    ttft_target_s: float | None = None
    max_wait_s: float | None = None  # the plan's queue wait budget (None: it sheds)


def express_for(ticket: Ticket | None, settings: Settings, *, tenant_weight: float,
                ttft_target_s: float, max_wait_s: float | None = None) -> Express | None:
    """None when the door placed nothing (no ticket lent, or the deployment lends none:
    ``FAIRWAY_EXPRESS_TICKETS=0``). ``ttft_target_s``: the plan's, 0 for none (as the plan
    row says); ``max_wait_s``: its queue wait budget, None when it sheds."""
    if ticket is None:
        return None
    return Express(ticket, settings.jobs.lease_seconds, float(tenant_weight),
                   ttft_target_s or None, max_wait_s)


def door_entry(req: DoorRequest, job_id: uuid.UUID, priority: int) -> handoff.ExpressEntry:
    """The hand-off entry of the job the door is admitting, for whichever worker lent the
    model's next ticket, with the current span's trace context (the worker's spans continue
    it). The body is the request as the row will store it."""
    body = handoff.carried_body(req.endpoint, req.stored,
                                max_tokens=req.max_tokens, priority=priority,
                                tenant_id=str(req.tenant.id))
    entry = handoff.Handoff(str(job_id), 1, tracing.inject() or None, body, ahead=True)
    return handoff.ExpressEntry(req.model, handoff.encode(entry))


def placed_wakeup(job: Job, express: Express) -> wakeups.JobPlaced:
    """The NOTIFY of a placed job, with the dispatcher's view of it: as the dispatcher would
    read it from the row (the body as stored)."""
    estimate, prefix_key, prefix_tokens = prompt_shape(job.request)
    view = wakeups.PlacedView(
        job.tenant_id, express.tenant_weight, job.priority, job.model, time.time(),
        job.deadline_at.timestamp() if job.deadline_at else None, job.max_tokens, estimate,
        prefix_key, prefix_tokens, express.ttft_target_s, job.attempt, express.max_wait_s)
    return wakeups.JobPlaced(job.id, express.ticket.worker_id, express.ticket.ticket,
                             tracing.traceparent(), view)
