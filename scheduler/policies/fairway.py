"""Fairway's full policy: class levels, weighted VTC per class, EDF per tenant, deadline
escalation, affinity placement, adaptive realtime headroom, victim choice and admission.

Ordering, per ``schedule(now)`` pass:

1. Due batch escalates: a batch job whose latest start (deadline - predicted service -
   margin) has come moves to level 0, beside realtime, before its deadline.
2. New realtime jobs are admitted or refused (``admission``); flex is refused first.
3. Level 0 (realtime + escalated batch), then level 1 (batch) fill the room. Within a level,
   the backlogged tenant with the smallest weighted VTC counter goes next (over the models
   that still have room); within a tenant, the earliest deadline.

Realtime goes to the worker where its first token is predicted soonest, from the engines'
step clocks (``rt_start``); a level-0 realtime job that finds no room takes it from batch
(``victims``); an escalated flex job that finds none is refused rather than run late. With
``rt_lane`` (off by default), realtime is served on workers kept clear of batch (``lane``,
``fairway_place``). See docs/scheduler.md for the bounds.
"""

from __future__ import annotations

import heapq

from scheduler.interface import SchedulingPolicy
from scheduler.policies import admission, rt_start
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fairqueue import EdfKey, FairQueue
from scheduler.policies.fairway_place import PlacementMixin
from scheduler.policies.lane import LaneConfig, RealtimeLanes
from scheduler.policies.placement import Pool
from scheduler.policies.vtc import VirtualCounters
from scheduler.policies.workers import AssignedJob, Headroom, WorkerState, kv_need
from scheduler.types import Assign, Decision, JobClass, JobView, Reject, WorkerView

LEVELS = (0, 1)


class FairwayPolicy(PlacementMixin, SchedulingPolicy):
    def __init__(self, config: FairwayConfig | None = None) -> None:
        self.config = cfg = config or FairwayConfig()
        self.counters = [VirtualCounters(cfg.w_in, cfg.w_out) for _ in LEVELS]
        self._queues: list[dict[str, FairQueue]] = [{} for _ in LEVELS]
        self._queued: dict[str, tuple[int, str]] = {}  # job_id -> (level, model)
        self._escalation: list[tuple[float, str]] = []
        self._escalated: set[str] = set()
        self._new_realtime: list[str] = []
        self._new_flex: list[str] = []
        self._flex: dict[str, set[str]] = {}  # model -> queued flex job ids
        self._overloaded_until: dict[str, float] = {}
        self._workers: dict[str, WorkerState] = {}
        self._pools: dict[str, Pool] = {}
        self._where: dict[str, str] = {}  # assigned job_id -> worker_id
        self._charged: dict[str, tuple[int, str, int, int]] = {}  # level, tenant, in, out
        self._headroom = Headroom(
            cfg.headroom_tau_s,
            cfg.headroom_k,
            cfg.headroom_min_slots,
            cfg.headroom_max_frac,
            cfg.headroom_enabled,
        )
        self._rt_size = admission.ServiceEstimate()
        self._lanes: RealtimeLanes | None = None
        if cfg.rt_lane:
            self._lanes = RealtimeLanes(
                LaneConfig(
                    cfg.lane_rt_per_worker,
                    cfg.headroom_k,
                    cfg.lane_max_frac,
                    cfg.lane_hold_s,
                    cfg.headroom_tau_s,
                    cfg.lane_batch_slots,
                    cfg.lane_batch_max_prompt,
                    cfg.lane_min_workers,
                )
            )
        self._now = 0.0

    # -- notifications -----------------------------------------------------------------

    def on_job_arrived(self, job: JobView) -> None:
        if job.job_id in self._queued:
            return
        if job.job_id in self._where:  # back after a lost lease: forget the old placement
            self._unassign(job.job_id, refund=True)
        level = 0 if job.job_class is JobClass.REALTIME else 1
        self._enqueue(job, level, self._edf_key(job))
        if level == 0:
            self._new_realtime.append(job.job_id)
            self._headroom.note_realtime(job)
            if self._lanes is not None:
                self._lanes.note_realtime(job.model, self._now)
        else:
            heapq.heappush(self._escalation, (self._escalate_at(job), job.job_id))
            if job.priority == self.config.flex_priority:
                self._flex.setdefault(job.model, set()).add(job.job_id)
                self._new_flex.append(job.job_id)

    def on_job_cancelled(self, job_id: str) -> None:
        self._dequeue(job_id)

    def on_job_finished(
        self, job_id: str, worker_id: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        charged = self._charged.pop(job_id, None)
        # (0, 0) means "usage unknown" (the dispatcher may not have it): keep the estimate.
        if charged is not None and (prompt_tokens or completion_tokens):
            level, tenant, charged_in, charged_out = charged
            self.counters[level].charge(
                tenant, prompt_tokens - charged_in, completion_tokens - charged_out
            )
            self._refresh(level, tenant)
        item = self._unassign(job_id, refund=False)
        if item is not None and item.is_realtime:
            self._rt_size.observe(prompt_tokens, completion_tokens)
        self._left_engine(job_id, worker_id)

    def _left_engine(self, job_id: str, worker_id: str) -> None:
        """The last heartbeat counted this job in ``running``: it no longer does. Without
        this the slot stays taken until the next beat (a second or two of an idle slot per
        finished job under a batch backlog)."""
        ws = self._workers.get(worker_id)
        if ws is None or job_id not in ws.view.running_ids:
            return
        before = ws.used_slots()
        ws.view.running_ids = ws.view.running_ids - {job_id}
        ws.view.running = max(0, ws.view.running - 1)
        ws.load_version += 1
        self._touch(ws, before, 0)

    def on_worker_heartbeat(self, worker: WorkerView) -> None:
        ws = self._workers.get(worker.worker_id)
        if ws is None:
            ws = WorkerState(worker, worker.cost or self.config.default_cost, ewma_at=self._now)
            self._workers[worker.worker_id] = ws
            for model in worker.models:
                self._pool(model).join(ws)
            return
        old_view, old_used = ws.view, ws.used_slots()
        for model in set(old_view.models) - set(worker.models):
            self._pools[model].leave(worker.worker_id)  # before the view changes: it subtracts
        ws.view = worker
        ws.cost = worker.cost or ws.cost
        ws.load_version += 1
        for model in worker.models:
            pool = self._pool(model)
            if worker.worker_id in pool.workers:
                pool.update(ws, old_view.max_slots, old_used)
            else:
                pool.join(ws)

    def on_worker_step(self, worker_id: str, started_at: float | None, step_s: float) -> None:
        ws = self._workers.get(worker_id)
        if ws is not None:
            ws.step_started_at, ws.step_s = started_at, step_s

    def on_worker_lost(self, worker_id: str) -> None:
        ws = self._workers.get(worker_id)
        if ws is None:
            return
        for job_id in list(ws.jobs):
            self._unassign(job_id, refund=True)
        del self._workers[worker_id]
        for model in ws.view.models:
            self._pools[model].leave(worker_id)

    def num_queued(self) -> int:
        return len(self._queued)

    def level_of(self, job_id: str) -> int | None:
        """0 = realtime level (realtime or escalated), 1 = batch, None = not queued."""
        where = self._queued.get(job_id)
        return None if where is None else where[0]

    def worker_of(self, job_id: str) -> str | None:
        return self._where.get(job_id)

    # -- the pass ----------------------------------------------------------------------

    def schedule(self, now: float) -> list[Decision]:
        self._now = now
        decisions: list[Decision] = []
        self._escalate_due(now)
        self._admit(now, decisions)
        if self._lanes is not None:
            self._resize_lanes(self._lanes, now, decisions)
        for level in LEVELS:
            self._fill(level, now, decisions)
        return decisions

    def _fill(self, level: int, now: float, decisions: list[Decision]) -> None:
        blocked: set[str] = set()
        deferred: list[tuple[JobView, EdfKey]] = []
        while len(deferred) < self.config.max_deferred_per_pass:
            fq = self._next_queue(level, blocked)
            if fq is None:
                break
            job = fq.pop()
            assert job is not None  # _next_queue returns non-empty queues only
            self._forget_queued(job, level)
            if self._try_place(job, level, now, decisions):
                continue
            deferred.append((job, self._edf_key(job)))
            if not self._room_left(job.model, level, now):
                blocked.add(job.model)
        for job, key in deferred:
            self._queues[level][job.model].add(job, key)
            self._queued[job.job_id] = (level, job.model)
            self._count_rt_queued(job, level, +1)
            if job.job_class is JobClass.BATCH and job.priority == self.config.flex_priority:
                self._flex.setdefault(job.model, set()).add(job.job_id)

    def _next_queue(self, level: int, blocked: set[str]) -> FairQueue | None:
        """The model queue whose head tenant has the smallest counter, among unblocked ones."""
        best: FairQueue | None = None
        best_counter = 0.0
        for model, fq in self._queues[level].items():
            if model in blocked or not fq:
                continue
            counter = fq.min_counter()
            if counter is not None and (best is None or counter < best_counter):
                best, best_counter = fq, counter
        return best

    def _assign(
        self, job: JobView, ws: WorkerState, level: int, now: float, out: list[Decision]
    ) -> None:
        self._escalated.discard(job.job_id)
        before = ws.used_slots()
        item = AssignedJob(job, now, kv_need(job), level)
        ws.add(item, now, self.config.headroom_tau_s)
        self._where[job.job_id] = ws.worker_id
        self._touch(ws, before, +1 if item.is_realtime else 0)
        if item.is_realtime:
            rt_start.note_realtime(ws, job, now, self.config.dispatch_lead_s)
        counters = self.counters[level]
        counters.note_pick(job.tenant_id)
        counters.charge(job.tenant_id, job.prompt_tokens, job.max_tokens)
        self._charged[job.job_id] = (level, job.tenant_id, job.prompt_tokens, job.max_tokens)
        self._refresh(level, job.tenant_id)
        out.append(Assign(job.job_id, ws.worker_id))

    def _unassign(self, job_id: str, *, refund: bool) -> AssignedJob | None:
        worker_id = self._where.pop(job_id, None)
        ws = self._workers.get(worker_id) if worker_id is not None else None
        if refund and job_id in self._charged:
            level, tenant, charged_in, charged_out = self._charged.pop(job_id)
            self.counters[level].charge(tenant, -charged_in, -charged_out)
            self._refresh(level, tenant)
        if ws is None:
            return None
        before = ws.used_slots()
        item = ws.remove(job_id, self._now, self.config.headroom_tau_s)
        if item is not None:
            self._touch(ws, before, -1 if item.is_realtime else 0)
        return item

    def _touch(self, ws: WorkerState, used_before: int, rt_delta: int) -> None:
        delta = ws.used_slots() - used_before
        for model in ws.view.models:
            pool = self._pools[model]
            pool.used_total += delta
            pool.rt_inflight += rt_delta
            pool.push(ws)

    # -- queue bookkeeping -------------------------------------------------------------

    def _enqueue(self, job: JobView, level: int, key: EdfKey) -> None:
        counters = self.counters[level]
        counters.set_weight(job.tenant_id, job.tenant_weight)
        queues = self._queues[level]
        if not any(fq.has_tenant(job.tenant_id) for fq in queues.values()):
            mins = [c for c in (fq.min_counter() for fq in queues.values()) if c is not None]
            counters.lift(job.tenant_id, min(mins) if mins else None)
        queues.setdefault(job.model, FairQueue(counters)).add(job, key)
        self._queued[job.job_id] = (level, job.model)
        self._count_rt_queued(job, level, +1)

    def _dequeue(self, job_id: str) -> JobView | None:
        where = self._queued.get(job_id)
        if where is None:
            return None
        job = self._queues[where[0]][where[1]].remove(job_id)
        if job is not None:
            self._forget_queued(job, where[0])
        return job

    def _forget_queued(self, job: JobView, level: int) -> None:
        del self._queued[job.job_id]
        self._count_rt_queued(job, level, -1)
        flex = self._flex.get(job.model)
        if flex is not None:
            flex.discard(job.job_id)

    def _pool(self, model: str) -> Pool:
        pool = self._pools.get(model)
        if pool is None:
            pool = self._pools[model] = Pool(model)
        return pool

    def _count_rt_queued(self, job: JobView, level: int, sign: int) -> None:
        if level == 0:
            pool = self._pool(job.model)
            pool.rt_queued += sign
            pool.rt_queued_prefill += sign * job.prompt_tokens

    def _refresh(self, level: int, tenant: str) -> None:
        for fq in self._queues[level].values():
            fq.refresh(tenant)

    def _edf_key(self, job: JobView) -> EdfKey:
        if job.job_class is JobClass.REALTIME:
            deadline = job.arrival + self.config.ttft_slo(job.priority, job.ttft_slo_s)
        elif job.deadline is not None:
            deadline = job.deadline
        else:
            deadline = job.arrival + self.config.default_batch_window_s
        return (deadline, job.arrival, job.job_id)

    def _escalate_at(self, job: JobView) -> float:
        pool = self._pools.get(job.model)
        cost = pool.cost if pool is not None and pool.cost else self.config.default_cost
        batch = max(1, int(pool.mean_used())) if pool is not None else cost.max_slots
        service = cost.service_s(job.prompt_tokens, job.max_tokens, batch)
        return self._edf_key(job)[0] - service - self.config.escalation_margin_s

    def _escalate_due(self, now: float) -> None:
        while self._escalation and self._escalation[0][0] <= now:
            _, job_id = heapq.heappop(self._escalation)
            where = self._queued.get(job_id)
            if where is None or where[0] != 1:
                continue  # assigned, cancelled or already escalated: a stale entry
            job = self._dequeue(job_id)
            if job is not None:
                self._enqueue(job, 0, self._edf_key(job))
                self._escalated.add(job_id)
                if job.priority == self.config.flex_priority:
                    self._flex.setdefault(job.model, set()).add(job_id)

    # -- admission ---------------------------------------------------------------------

    def _admit(self, now: float, out: list[Decision]) -> None:
        cfg = self.config
        for job_id in self._new_flex:
            where = self._queued.get(job_id)
            if where is not None and self._overloaded_until.get(where[1], -1.0) > now:
                self._reject(job_id, "flex_overload", cfg.overload_hold_s, out)
        self._new_flex.clear()
        for job_id in self._new_realtime:
            where = self._queued.get(job_id)
            if where is None:
                continue
            job = self._queues[where[0]][where[1]].get(job_id)
            if job is not None:
                self._admit_one(job, now, out)
        self._new_realtime.clear()

    def _admit_one(self, job: JobView, now: float, out: list[Decision]) -> None:
        cfg = self.config
        pool = self._pools.get(job.model)
        if pool is None or not pool.workers:
            # No worker serves the model right now (one is starting or restarting): the job
            # waits in the queue rather than being refused; the API's timeout bounds the wait.
            return
        if kv_need(job) > pool.kv_capacity_max:
            self._reject(job.job_id, "no_capacity_for_model", 30.0, out)
            return
        cost = pool.cost or cfg.default_cost
        slo = cfg.ttft_slo(job.priority, job.ttft_slo_s)
        predicted = admission.predict_ttft(job, pool, now, cost, self._rt_size)
        if predicted <= slo * (1 + cfg.admission_tolerance):
            return
        for flex_id in sorted(self._flex.get(job.model, ())):
            self._reject(flex_id, "flex_shed", cfg.overload_hold_s, out)
        self._overloaded_until[job.model] = now + cfg.overload_hold_s
        retry = admission.retry_after_s(predicted, slo, cfg.min_retry_after_s)
        self._reject(job.job_id, "ttft_slo_unreachable", retry, out)

    def _reject(self, job_id: str, reason: str, retry_after: float, out: list[Decision]) -> None:
        if self._dequeue(job_id) is not None:
            self._escalated.discard(job_id)
            out.append(Reject(job_id, reason, retry_after))
