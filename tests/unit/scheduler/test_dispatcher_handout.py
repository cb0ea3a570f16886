"""How the dispatcher carries out a pass's assignments (scheduler.dispatcher.handout): one
claim for all of them, then realtime by hand-off and batch by Celery; what the claim left out
goes back to the policy."""

from __future__ import annotations

import uuid

from scheduler.dispatcher.handout import Placed, placements, plan_sends
from scheduler.types import Assign, JobClass

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
