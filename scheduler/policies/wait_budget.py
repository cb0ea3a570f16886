"""A plan's longest queue wait, kept: a realtime job that a ``queue``-mode plan admitted and
that is still queued in the policy when its wait budget (``JobView.max_wait_s``) runs out is
refused then, with 429 and Retry-After, instead of waiting on past what its plan promises.

Admission judges a predicted wait; under a load the prediction under-counts (long queues,
a slower engine than its profile), an admitted request used to wait on without bound (the
simulated sweeps: accepted requests still queued when the run ended). The budget counts from
the job's arrival, or from when its model's pool got a worker if it had none (a cold start
is the waiting room's to bound, not the plan's). A job placed on a worker is past the queue:
its wait for the engine's own queue is the TTFT target's business. A job back in the queue
after a lost worker or a preemption (``requeued``) was started once and is not expired.
"""

from __future__ import annotations

import heapq

from scheduler.policies.config import FairwayConfig
from scheduler.policies.fleet import Fleet
from scheduler.policies.waiting import WaitingJobs
from scheduler.types import Decision, JobClass, JobView, Reject

REASON = "queue_wait_expired"


class WaitBudgets:
    def __init__(self, config: FairwayConfig, fleet: Fleet, waiting: WaitingJobs) -> None:
        self._config = config
        self._fleet = fleet
        self._waiting = waiting
        self._due: list[tuple[float, str, float]] = []  # (expires at, job id, budget), a heap

    def note(self, job: JobView) -> None:
        """A job arrived: a queue-mode realtime job's budget starts."""
        if (job.job_class is JobClass.REALTIME and job.max_wait_s is not None
                and not job.requeued):
            heapq.heappush(self._due, (job.arrival + job.max_wait_s, job.job_id, job.max_wait_s))

    def expire(self, now: float) -> list[Decision]:
        """Refuse the jobs still queued whose budget ran out by ``now``."""
        out: list[Decision] = []
        while self._due and self._due[0][0] <= now:
            _, job_id, budget = heapq.heappop(self._due)
            job = self._waiting.get(job_id)
            if job is None:
                continue  # placed, cancelled or refused meanwhile
            pool = self._fleet.pools.get(job.model)
            if pool is None or not pool.workers:
                heapq.heappush(self._due, (now + budget, job_id, budget))
                continue
            self._waiting.withdraw(job_id)
            self._waiting.clear_escalated(job_id)
            out.append(Reject(job_id, REASON, self._config.min_retry_after_s))
        return out
