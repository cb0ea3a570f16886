"""Baseline policies: FCFS, and strict priority then arrival. Least-loaded placement.

These are the comparison baselines for benchmarks, and the dispatcher's default until the
full Fairway policy is selected.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from scheduler.interface import SchedulingPolicy
from scheduler.types import Assign, Decision, ExpressGrant, JobView, WorkerView


class OrderedPolicy(SchedulingPolicy):
    def __init__(self, *, by_priority: bool) -> None:
        self._by_priority = by_priority
        self._heap: list[tuple[int, float, str]] = []
        self._jobs: dict[str, JobView] = {}
        self._workers: dict[str, WorkerView] = {}

    def _key(self, job: JobView) -> tuple[int, float, str]:
        return (job.priority if self._by_priority else 0, job.arrival, job.job_id)

    def on_job_arrived(self, job: JobView) -> None:
        if job.job_id in self._jobs:
            return
        self._jobs[job.job_id] = job
        heapq.heappush(self._heap, self._key(job))

    def on_job_cancelled(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)  # its heap entry is skipped lazily

    def on_job_finished(
        self, job_id: str, worker_id: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        worker = self._workers.get(worker_id)
        if worker is not None:
            worker.assigned.pop(job_id, None)

    def on_worker_heartbeat(self, worker: WorkerView) -> None:
        known = self._workers.get(worker.worker_id)
        if known is not None:
            worker.assigned = known.assigned
        self._workers[worker.worker_id] = worker

    def on_worker_lost(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    def num_queued(self) -> int:
        return len(self._jobs)

    def express(self, now: float, held: Mapping[str, int], per_model: int) -> list[ExpressGrant]:
        """Tickets to the least-loaded worker of each model with nothing queued."""
        waiting = {job.model for job in self._jobs.values()}
        served = {model for w in self._workers.values() for model in w.models}
        grants = []
        for model in sorted(served - waiting):
            worker = self._least_loaded(model)
            room = worker.free_slots - held.get(worker.worker_id, 0) if worker else 0
            if worker is not None and room >= 1 and per_model >= 1:
                grants.append(ExpressGrant(model, worker.worker_id, min(per_model, room)))
        return grants

    def on_job_placed(self, job: JobView, worker_id: str) -> bool:
        worker = self._workers.get(worker_id)
        if worker is None or job.model not in worker.models:
            return False
        self._jobs.pop(job.job_id, None)  # e.g. a rescan offered it before its NOTIFY came
        worker.assigned[job.job_id] = job.job_class
        return True

    def schedule(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        blocked: list[tuple[int, float, str]] = []  # jobs whose model has no room now
        while self._heap:
            entry = heapq.heappop(self._heap)
            job = self._jobs.get(entry[2])
            if job is None:
                continue
            worker = self._least_loaded(job.model)
            if worker is None:
                blocked.append(entry)
                if not self._by_priority or not self._any_room():
                    break
                continue
            del self._jobs[job.job_id]
            worker.assigned[job.job_id] = job.job_class
            decisions.append(Assign(job.job_id, worker.worker_id))
        for entry in blocked:
            heapq.heappush(self._heap, entry)
        return decisions

    def _least_loaded(self, model: str) -> WorkerView | None:
        candidates = [w for w in self._workers.values() if model in w.models and w.free_slots > 0]
        return max(candidates, key=lambda w: (w.free_slots, w.worker_id), default=None)

    def _any_room(self) -> bool:
        return any(w.free_slots > 0 for w in self._workers.values())
