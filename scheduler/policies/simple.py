"""Baseline policies: FCFS, and strict priority then arrival. Least-loaded placement.

These are the comparison baselines for benchmarks, and the dispatcher's default until the
full Fairway policy is selected.
"""

from __future__ import annotations

import heapq

from scheduler.interface import SchedulingPolicy
from scheduler.types import Assign, Decision, JobView, WorkerView


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
