"""The jobs waiting for a worker, in the order Fairway serves them.

Two levels: 0 holds realtime and escalated batch, 1 the rest of batch, and a pass fills
level 0 first. Within a level, one ``FairQueue`` per model orders tenants by their weighted
VTC counter (``vtc.py``: service received per weight, charged here) and each tenant's jobs by
deadline (EDF). A batch job moves to level 0 when its latest start comes (deadline -
predicted service - ``escalation_margin_s``), so it starts before its deadline whatever the
realtime load.

Queued realtime is also counted in its model's pool (``Pool.rt_queued``, ``rt_queued_prefill``)
for admission's TTFT prediction and the lane's size.
"""

from __future__ import annotations

import heapq

from scheduler.outlook import Backlog
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fairqueue import EdfKey, FairQueue, PickKey
from scheduler.policies.fleet import Fleet
from scheduler.policies.lengths import OutputLengthPredictor
from scheduler.policies.vtc import VirtualCounters
from scheduler.types import JobClass, JobView

LEVELS = (0, 1)


class WaitingJobs:
    def __init__(self, config: FairwayConfig, fleet: Fleet) -> None:
        self.config = config
        self._fleet = fleet
        self.counters = [VirtualCounters(config.w_in, config.w_out) for _ in LEVELS]
        self._queues: list[dict[str, FairQueue]] = [{} for _ in LEVELS]
        self._queued: dict[str, tuple[int, str]] = {}  # job_id -> (level, model)
        self._flex: dict[str, set[str]] = {}  # model -> queued flex job ids
        self._escalation: list[tuple[float, str]] = []  # (latest start, job_id), a heap
        self._escalated: set[str] = set()  # escalated and not yet assigned or refused
        self.lengths = OutputLengthPredictor()  # used with config.length_aware

    def __len__(self) -> int:
        return len(self._queued)

    def level_of(self, job_id: str) -> int | None:
        where = self._queued.get(job_id)
        return None if where is None else where[0]

    def model_of(self, job_id: str) -> str | None:
        where = self._queued.get(job_id)
        return None if where is None else where[1]

    def get(self, job_id: str) -> JobView | None:
        where = self._queued.get(job_id)
        return None if where is None else self._queues[where[0]][where[1]].get(job_id)

    def flex_ids(self, model: str) -> list[str]:
        """The model's queued flex jobs, in id order (what admission sheds first)."""
        return sorted(self._flex.get(model, ()))

    def is_escalated(self, job_id: str) -> bool:
        return job_id in self._escalated

    def clear_escalated(self, job_id: str) -> None:
        self._escalated.discard(job_id)

    # -- in and out --------------------------------------------------------------------

    def add(self, job: JobView) -> None:
        """A job arrived (or came back): realtime at level 0, batch at level 1 until due."""
        if job.job_class is JobClass.REALTIME:
            self._enqueue(job, 0)
        else:
            self._enqueue(job, 1)
            heapq.heappush(self._escalation, (self._escalate_at(job), job.job_id))

    def withdraw(self, job_id: str) -> JobView | None:
        """Take a queued job out (cancelled, refused, escalating); None if it is not queued."""
        where = self._queued.get(job_id)
        if where is None:
            return None
        job = self._queues[where[0]][where[1]].remove(job_id)
        if job is not None:
            self._forget(job, where[0])
        return job

    def next_job(self, level: int, blocked: set[str]) -> JobView | None:
        """Take out the level's next job, among models not in ``blocked``: with an EDF slack
        at this level, the earliest deadline of the tenants within the slack of the smallest
        counter (``_earliest_eligible``); else from the model queue whose head tenant has the
        smallest counter."""
        queues = [(m, fq) for m, fq in self._queues[level].items() if m not in blocked and fq]
        slack = self.config.edf_slack_units if level == 0 else 0.0
        if slack > 0:
            job = self._earliest_eligible(queues, slack)
        else:
            job = self._smallest_counter(queues)
        if job is not None:
            self._forget(job, level)
        return job

    def _smallest_counter(self, queues: list[tuple[str, FairQueue]]) -> JobView | None:
        best: FairQueue | None = None
        best_counter = 0.0
        for _, fq in queues:
            counter = fq.min_counter()
            if counter is not None and (best is None or counter < best_counter):
                best, best_counter = fq, counter
        return None if best is None else best.pop()

    def _earliest_eligible(self, queues: list[tuple[str, FairQueue]], slack: float
                           ) -> JobView | None:
        """EEVDF-like: a tenant is eligible while its counter is within ``slack`` of the
        smallest backlogged one; of the eligible, the earliest deadline goes next. A tighter
        target then goes first across tenants of one level, and fair share still binds: a
        tenant served past the slack waits until the others catch up."""
        mins = [c for c in (fq.min_counter() for _, fq in queues) if c is not None]
        if not mins:
            return None
        limit = min(mins) + slack
        cap = self.config.edf_scan_limit
        best: tuple[PickKey, FairQueue, JobView] | None = None
        for _, fq in queues:
            found = fq.earliest_eligible(limit, cap)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], fq, found[1])
        if best is None:
            return None
        best[1].remove(best[2].job_id)
        return best[2]

    def backlog(self, model: str) -> list[Backlog]:
        """The model's queue at level 0 (realtime and due batch) by tenant: (tenant, jobs
        queued, weight), for the admission's fair-share prediction."""
        fq = self._queues[0].get(model)
        if fq is None:
            return []
        counters = self.counters[0]
        return [(t, n, counters.weights.get(t, 1.0)) for t, n in fq.tenant_counts()]

    def deadlines(self, model: str, tenants: list[str], now: float
                  ) -> tuple[tuple[str, float, float], ...]:
        """When each of ``tenants``' jobs queued at level 0 for the model are due, seconds
        from ``now``: (tenant, earliest, latest), for the admission's EDF prediction."""
        fq = self._queues[0].get(model)
        if fq is None:
            return ()
        spans = ((t, fq.deadline_span(t)) for t in tenants)
        return tuple((t, span[0] - now, span[1] - now) for t, span in spans if span is not None)

    def put_back(self, job: JobView, level: int) -> None:
        """A job ``next_job`` took out found no room this pass: it waits where it was. Its
        tenant stays backlogged, so unlike a new arrival its counter is not lifted."""
        self._queues[level][job.model].add(job, self.edf_key_at(job, level))
        self._index(job, level)

    def escalate_due(self, now: float) -> None:
        while self._escalation and self._escalation[0][0] <= now:
            _, job_id = heapq.heappop(self._escalation)
            if self.level_of(job_id) != 1:
                continue  # assigned, cancelled or already escalated: a stale entry
            job = self.withdraw(job_id)
            if job is not None:
                self._enqueue(job, 0)
                self._escalated.add(job_id)

    # -- fair share --------------------------------------------------------------------

    def charge_assigned(self, job: JobView, level: int) -> None:
        """The job was assigned: its tenant is charged its prompt and full ``max_tokens``
        (corrected when it finishes) and becomes the idle tenants' lift target."""
        counters = self.counters[level]
        counters.note_pick(job.tenant_id)
        counters.charge(job.tenant_id, job.prompt_tokens, job.max_tokens)
        self._refresh(level, job.tenant_id)

    def charge_placed(self, job: JobView, level: int) -> None:
        """A job placed without ever waiting (the express path, express_grants.py): its tenant's
        weight and idle lift as an arrival's, then the charge of an assignment."""
        self._arrive(job, level)
        self.charge_assigned(job, level)

    def charge(self, level: int, tenant: str, prompt_tokens: int, output_tokens: int) -> None:
        """Correct a tenant's counter (negative amounts refund)."""
        self.counters[level].charge(tenant, prompt_tokens, output_tokens)
        self._refresh(level, tenant)

    def edf_key(self, job: JobView) -> EdfKey:
        return self.edf_key_at(job, 0)

    def edf_key_at(self, job: JobView, level: int) -> EdfKey:
        """EDF; with ``length_aware``, batch at level 1 by virtual arrival (lengths.py)."""
        if self.config.length_aware and level == 1 and job.job_class is JobClass.BATCH:
            cfg = self.config
            original_prompt = job.prompt_tokens - job.generated_tokens
            predicted = self.lengths.predict(
                job.tenant_id, original_prompt, job.max_tokens + job.generated_tokens
            )
            left = max(0.0, predicted - job.generated_tokens)
            size = cfg.w_in * job.prompt_tokens + cfg.w_out * left
            return (job.arrival + cfg.length_aging_s_per_unit * size, job.arrival, job.job_id)
        if job.job_class is JobClass.REALTIME:
            deadline = job.arrival + self.config.ttft_slo(job.priority, job.ttft_slo_s)
        elif job.deadline is not None:
            deadline = job.deadline
        else:
            deadline = job.arrival + self.config.default_batch_window_s
        return (deadline, job.arrival, job.job_id)

    # -- internals ---------------------------------------------------------------------

    def _enqueue(self, job: JobView, level: int) -> None:
        self._arrive(job, level)
        queues = self._queues[level]
        queues.setdefault(job.model, FairQueue(self.counters[level])).add(
            job, self.edf_key_at(job, level))
        self._index(job, level)

    def _arrive(self, job: JobView, level: int) -> None:
        counters = self.counters[level]
        counters.set_weight(job.tenant_id, job.tenant_weight)
        queues = self._queues[level]
        if not any(fq.has_tenant(job.tenant_id) for fq in queues.values()):
            # Back from idle at this level: no banked credit (vtc.py).
            mins = [c for c in (fq.min_counter() for fq in queues.values()) if c is not None]
            counters.lift(job.tenant_id, min(mins) if mins else None)

    def _index(self, job: JobView, level: int) -> None:
        self._queued[job.job_id] = (level, job.model)
        self._count_queued(job, level, +1)
        if job.job_class is JobClass.BATCH and job.priority == self.config.flex_priority:
            self._flex.setdefault(job.model, set()).add(job.job_id)

    def _forget(self, job: JobView, level: int) -> None:
        del self._queued[job.job_id]
        self._count_queued(job, level, -1)
        flex = self._flex.get(job.model)
        if flex is not None:
            flex.discard(job.job_id)

    def _count_queued(self, job: JobView, level: int, sign: int) -> None:
        pool = self._fleet.pool(job.model)
        if level == 0:
            pool.rt_queued += sign
            pool.rt_queued_prefill += sign * job.prompt_tokens
        else:
            pool.batch_queued += sign

    def _refresh(self, level: int, tenant: str) -> None:
        for fq in self._queues[level].values():
            fq.refresh(tenant)

    def _escalate_at(self, job: JobView) -> float:
        pool = self._fleet.pools.get(job.model)
        cost = pool.cost if pool is not None and pool.cost else self.config.default_cost
        batch = max(1, int(pool.mean_used())) if pool is not None else cost.max_slots
        service = cost.service_s(job.prompt_tokens, job.max_tokens, batch)
        return self.edf_key(job)[0] - service - self.config.escalation_margin_s
