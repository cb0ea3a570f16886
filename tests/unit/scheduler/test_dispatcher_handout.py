"""How the dispatcher carries out a pass's assignments (scheduler.dispatcher.handout): one
claim for all of them, then realtime by hand-off and batch by Celery; what the claim left out
goes back to the policy."""

from __future__ import annotations

import datetime as dt
import uuid

from scheduler.dispatcher.handout import Placed, carried, placements, plan_sends
from scheduler.types import Assign, JobClass
from service.store.job_queries import QueuedJob

A, B, C, D = (str(uuid.UUID(int=i)) for i in range(1, 5))


def test_one_claim_pair_per_job_first_decision_wins() -> None:
    assigns = [Assign(A, "w1"), Assign(B, "w2"), Assign(A, "w2")]
    assert placements(assigns) == [(uuid.UUID(A), "w1"), (uuid.UUID(B), "w2")]


def test_claimed_jobs_split_by_class_and_unclaimed_ones_are_lost() -> None:
    assigns = [Assign(A, "w1"), Assign(B, "w2"), Assign(C, "w1"), Assign(D, "w2")]
    attempts = {uuid.UUID(A): 1, uuid.UUID(B): 3, uuid.UUID(D): 2}  # C: cancelled meanwhile
    classes = {A: JobClass.REALTIME, B: JobClass.BATCH, C: JobClass.REALTIME}
    plan = plan_sends(assigns, attempts, classes,
                      traces={A: {"traceparent": "00-a-b-01"}})
    assert plan.realtime == [Placed(A, "w1", 1, JobClass.REALTIME, {"traceparent": "00-a-b-01"}),
                             Placed(D, "w2", 2, JobClass.REALTIME)]  # unknown class: realtime
    assert plan.batch == [Placed(B, "w2", 3, JobClass.BATCH)]
    assert plan.lost == [Assign(C, "w1")]


def test_a_duplicate_decision_is_sent_once_and_its_twin_given_back() -> None:
    assigns = [Assign(A, "w1"), Assign(A, "w2")]
    plan = plan_sends(assigns, {uuid.UUID(A): 1}, {A: JobClass.REALTIME})
    assert [(p.job_id, p.worker_id) for p in plan.realtime] == [(A, "w1")]
    assert plan.lost == [Assign(A, "w2")]


def _queued(kind: str = "realtime", generated: int = 0,
            request: dict[str, object] | None = None) -> QueuedJob:
    return QueuedJob(uuid.UUID(A), 1, uuid.UUID(B), 1.0, kind, 0, "m",
                     dt.datetime.now(dt.UTC), None, 16, 10, None, generated,
                     endpoint="chat.completions",
                     request={"messages": []} if request is None else request)


def test_only_a_fresh_realtime_job_s_body_is_carried() -> None:
    body = carried(_queued())
    assert body is not None and (body.endpoint, body.max_tokens, body.tenant_id) == (
        "chat.completions", 16, B)
    assert carried(_queued(kind="batch")) is None  # batch goes by Celery, from its row
    assert carried(_queued(generated=5)) is None  # a checkpoint to continue: the row's


def test_a_body_rides_only_with_a_first_attempt() -> None:
    """A later attempt (a lost worker, a preemption) may hold a checkpoint the dispatcher's
    view predates: it starts from its claim's row."""
    body = carried(_queued())
    assigns = [Assign(A, "w1"), Assign(C, "w1")]
    plan = plan_sends(assigns, {uuid.UUID(A): 1, uuid.UUID(C): 2},
                      {A: JobClass.REALTIME, C: JobClass.REALTIME}, bodies={A: body, C: body})
    assert [(p.job_id, p.body) for p in plan.realtime] == [(A, body), (C, None)]
