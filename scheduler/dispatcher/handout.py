"""A pass's assignments carried out together: one claim statement for all of them, then one
Redis pipeline for the realtime hand-offs (service.store.handoff) and the preemptions, and the
batch jobs' Celery tasks over one producer. The plan is pure (``plan_sends``); the loop does
the I/O."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.types import Assign, JobClass
from service.store import handoff
from service.store.job_queries import QueuedJob

# Bodies kept for realtime jobs not yet sent, at most (past it, hand-offs carry none).
BODIES_MAX = 2_000


@dataclass(frozen=True, slots=True)
class Placed:
    """A claimed assignment: what to send, and to whom."""

    job_id: str
    worker_id: str
    attempt: int
    job_class: JobClass
    trace: dict[str, str] | None = None  # W3C trace context, for the hand-off message
    body: handoff.JobBody | None = None  # the engine input the hand-off carries, if any


@dataclass(slots=True)
class SendPlan:
    realtime: list[Placed]  # hand-off stream entries, one pipeline
    batch: list[Placed]  # Celery tasks
    lost: list[Assign]  # not claimed: cancelled or claimed since the policy saw them


def placements(assigns: Sequence[Assign]) -> list[tuple[uuid.UUID, str]]:
    """The claim statement's (job, worker) pairs, one per job (the first decision wins)."""
    seen: dict[str, str] = {}
    for a in assigns:
        seen.setdefault(a.job_id, a.worker_id)
    return [(uuid.UUID(j), w) for j, w in seen.items()]


def carried(job: QueuedJob) -> handoff.JobBody | None:
    """What a realtime job's hand-off carries for its worker to start the engine while it
    claims (service.store.handoff): only a fresh job's (no checkpoint to continue from)."""
    if job.request is None or job.generated_tokens or job.kind != JobClass.REALTIME:
        return None
    return handoff.carried_body(job.endpoint, job.request, max_tokens=job.max_tokens,
                                priority=job.priority, tenant_id=str(job.tenant_id))


def plan_sends(assigns: Sequence[Assign], attempts: Mapping[uuid.UUID, int],
               classes: Mapping[str, JobClass],
               traces: Mapping[str, dict[str, str]] | None = None,
               bodies: Mapping[str, handoff.JobBody | None] | None = None) -> SendPlan:
    """Split a pass's assignments by what the claim returned (``attempts``: job -> attempt)
    and by class: realtime goes by hand-off, everything else by Celery. A job the policy did
    not tell us the class of is realtime, as before (the lowest latency path)."""
    plan = SendPlan([], [], [])
    done: set[str] = set()
    for a in assigns:
        attempt = attempts.get(uuid.UUID(a.job_id))
        if attempt is None or a.job_id in done:
            plan.lost.append(a)
            continue
        done.add(a.job_id)
        job_class = classes.get(a.job_id, JobClass.REALTIME)
        body = (bodies or {}).get(a.job_id) if attempt == 1 else None
        placed = Placed(a.job_id, a.worker_id, attempt, job_class,
                        (traces or {}).get(a.job_id), body)
        (plan.realtime if job_class is JobClass.REALTIME else plan.batch).append(placed)
    return plan
