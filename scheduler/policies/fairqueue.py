"""One fair queue: the jobs of one (class level, model), tenants by VTC counter, each EDF.

``earliest_eligible`` adds the EEVDF-like pick: among the tenants whose counter is within a
slack of the smallest, the one whose next job has the earliest deadline.

Costs (n queued jobs, T tenants): add O(log n); peek/pop amortized O(log T + log n);
remove O(1) now plus a lazily skipped heap entry. Stale entries are skipped when they reach
the top and the heaps are rebuilt once stale entries outnumber live ones, which keeps the
amortized bound and the memory within a constant factor of the live jobs.
"""

from __future__ import annotations

import heapq

from scheduler.policies.vtc import VirtualCounters
from scheduler.types import JobView

EdfKey = tuple[float, float, str]  # (deadline, arrival, job_id)
PickKey = tuple[float, float, float, str]  # (deadline, tenant counter, arrival, job_id)


class FairQueue:
    def __init__(self, counters: VirtualCounters) -> None:
        self._counters = counters
        self._jobs: dict[str, tuple[JobView, int]] = {}  # job_id -> (view, token)
        self._edf: dict[str, list[tuple[float, float, str, int]]] = {}  # tenant -> heap
        self._live: dict[str, int] = {}  # tenant -> live jobs
        # tenant -> the latest deadline it queued since it was last idle (a bound: a job
        # taken out early, cancelled, leaves it as it was)
        self._latest: dict[str, float] = {}
        self._order: list[tuple[float, str, int]] = []  # (counter, tenant, version)
        self._pushed: dict[str, int] = {}  # tenant -> version of its newest order entry
        self._token = 0

    def __len__(self) -> int:
        return len(self._jobs)

    def has_tenant(self, tenant: str) -> bool:
        return self._live.get(tenant, 0) > 0

    def tenant_counts(self) -> list[tuple[str, int]]:
        """Each backlogged tenant and its queued jobs."""
        return list(self._live.items())

    def deadline_span(self, tenant: str) -> tuple[float, float] | None:
        """When the tenant's queued jobs are due: its earliest deadline and its latest (a
        bound); None when it has none queued."""
        if self._live.get(tenant, 0) == 0:
            return None
        return self._head_of(tenant)[0][0], self._latest[tenant]

    def get(self, job_id: str) -> JobView | None:
        item = self._jobs.get(job_id)
        return None if item is None else item[0]

    def add(self, job: JobView, key: EdfKey) -> None:
        self._token += 1
        self._jobs[job.job_id] = (job, self._token)
        heap = self._edf.setdefault(job.tenant_id, [])
        heapq.heappush(heap, (key[0], key[1], key[2], self._token))
        self._live[job.tenant_id] = self._live.get(job.tenant_id, 0) + 1
        self._latest[job.tenant_id] = max(key[0], self._latest.get(job.tenant_id, key[0]))
        self.refresh(job.tenant_id)

    def remove(self, job_id: str) -> JobView | None:
        item = self._jobs.pop(job_id, None)
        if item is None:
            return None
        tenant = item[0].tenant_id
        self._live[tenant] -= 1
        heap = self._edf[tenant]
        if self._live[tenant] == 0:
            del self._live[tenant], self._edf[tenant], self._latest[tenant]
        elif len(heap) > 2 * self._live[tenant] + 16:
            self._edf[tenant] = [e for e in heap if self._valid(e)]
            heapq.heapify(self._edf[tenant])
        return item[0]

    def refresh(self, tenant: str) -> None:
        """Make the tenant's order entry carry its current counter (after any change)."""
        version = self._counters.version(tenant)
        if self._live.get(tenant, 0) == 0 or self._pushed.get(tenant) == version:
            return
        self._pushed[tenant] = version
        heapq.heappush(self._order, (self._counters.value(tenant), tenant, version))
        if len(self._order) > 4 * len(self._live) + 64:
            self._rebuild_order()

    def head_tenant(self) -> str | None:
        """The backlogged tenant with the smallest counter."""
        order = self._order
        while order:
            _, tenant, version = order[0]
            if self._live.get(tenant, 0) == 0:
                heapq.heappop(order)
                self._pushed.pop(tenant, None)
                continue
            if version != self._counters.version(tenant):
                heapq.heappop(order)
                if self._pushed.get(tenant) == version:
                    self._pushed.pop(tenant, None)
                self.refresh(tenant)
                continue
            return tenant
        return None

    def min_counter(self) -> float | None:
        tenant = self.head_tenant()
        return None if tenant is None else self._counters.value(tenant)

    def peek(self) -> JobView | None:
        tenant = self.head_tenant()
        if tenant is None:
            return None
        heap = self._edf[tenant]
        while not self._valid(heap[0]):
            heapq.heappop(heap)
        return self._jobs[heap[0][2]][0]

    def pop(self) -> JobView | None:
        job = self.peek()
        if job is not None:
            self.remove(job.job_id)
        return job

    def earliest_eligible(self, limit: float, cap: int) -> tuple[PickKey, JobView] | None:
        """The earliest-deadline head job among at most ``cap`` tenants whose counter is at
        most ``limit`` (the smallest first), equal deadlines to the smaller counter; None
        when no tenant is that low. Costs O(k log T) for the k tenants looked at: their
        order entries are popped and pushed back after, and a stale entry met on the way is
        replaced by a fresh one in place."""
        kept: list[tuple[float, str, int]] = []
        best: tuple[PickKey, JobView] | None = None
        while self._order and len(kept) < cap:
            counter, tenant, version = self._order[0]
            if self._live.get(tenant, 0) == 0 or version != self._counters.version(tenant):
                heapq.heappop(self._order)
                if self._pushed.get(tenant) == version:
                    self._pushed.pop(tenant, None)
                    self._push_fresh(tenant)
                continue
            if counter > limit:
                break
            kept.append(heapq.heappop(self._order))
            (deadline, arrival, job_id), job = self._head_of(tenant)
            key = (deadline, counter, arrival, job_id)
            if best is None or key < best[0]:
                best = (key, job)
        for entry in kept:
            heapq.heappush(self._order, entry)
        return best

    def _head_of(self, tenant: str) -> tuple[EdfKey, JobView]:
        heap = self._edf[tenant]
        while not self._valid(heap[0]):
            heapq.heappop(heap)
        deadline, arrival, job_id, _ = heap[0]
        return (deadline, arrival, job_id), self._jobs[job_id][0]

    def _push_fresh(self, tenant: str) -> None:
        """``refresh`` without the rebuild, for use while entries are held out of the heap."""
        if self._live.get(tenant, 0) > 0:
            version = self._counters.version(tenant)
            self._pushed[tenant] = version
            heapq.heappush(self._order, (self._counters.value(tenant), tenant, version))

    def _valid(self, entry: tuple[float, float, str, int]) -> bool:
        item = self._jobs.get(entry[2])
        return item is not None and item[1] == entry[3]

    def _rebuild_order(self) -> None:
        self._pushed = {t: self._counters.version(t) for t in self._live}
        self._order = [(self._counters.value(t), t, self._pushed[t]) for t in self._live]
        heapq.heapify(self._order)
