"""The policy's picture of the fleet: every worker it knows (``WorkerState``), the pool that
serves each model (``Pool``) and the worker each job it assigned runs on.

This is the state the placer, the victim chooser and admission share. Workers and jobs come
and go only through ``FairwayPolicy`` calling the methods here, which keep each pool's totals
(``used_total``, ``rt_inflight``) and least-loaded heap in step with its workers' load; the
placer also moves workers in and out of realtime lanes (``repush``).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.policies import rt_start
from scheduler.policies.adapters import cpu_capacity
from scheduler.policies.config import FairwayConfig
from scheduler.policies.pool import Pool
from scheduler.policies.workers import AssignedJob, WorkerState, kv_need
from scheduler.types import JobView, WorkerView


class Fleet:
    def __init__(self, config: FairwayConfig) -> None:
        self.config = config
        self.workers: dict[str, WorkerState] = {}
        self.pools: dict[str, Pool] = {}
        self._where: dict[str, str] = {}  # assigned job_id -> worker_id

    def pool(self, model: str) -> Pool:
        """The model's pool, created empty the first time the model is named: queued realtime
        is counted there even before a worker serves it."""
        pool = self.pools.get(model)
        if pool is None:
            pool = self.pools[model] = Pool(model)
        return pool

    def worker_of(self, job_id: str) -> str | None:
        return self._where.get(job_id)

    # -- workers -----------------------------------------------------------------------

    def heartbeat(self, view: WorkerView, now: float) -> None:
        """Replace what is known of a worker by its latest heartbeat, less the jobs that left
        its engine since the beat was written. The dispatcher reads a worker's beat every
        refresh, several times per beat: without that, each re-read brought back the slots
        of jobs that had finished since (freed by ``left_engine``), and the pool sat idle
        with jobs queued until the worker's next beat (gaps of a second or two under load)."""
        ws = self.workers.get(view.worker_id)
        if ws is not None:
            view = _without_left(view, ws)
        if ws is None:
            ws = WorkerState(view, view.cost or self.config.default_cost, ewma_at=now)
            self.workers[view.worker_id] = ws
            self._adapters_reported(ws, now)
            for model in view.models:
                self.pool(model).join(ws)
            return
        old_view, old_used = ws.view, ws.used_slots()
        for model in set(old_view.models) - set(view.models):
            self.pools[model].leave(view.worker_id)  # before the view changes: it subtracts
        ws.view = view
        ws.cost = view.cost or ws.cost
        ws.load_version += 1
        self._adapters_reported(ws, now)
        for model in view.models:
            pool = self.pool(model)
            if view.worker_id in pool.workers:
                pool.update(ws, old_view.max_slots, old_used)
            else:
                pool.join(ws)

    def step_clock(self, worker_id: str, started_at: float | None, step_s: float) -> None:
        ws = self.workers.get(worker_id)
        if ws is not None:
            ws.step_started_at, ws.step_s = started_at, step_s

    def remove_worker(self, worker_id: str) -> None:
        """The worker is gone; release its jobs first (``release``)."""
        ws = self.workers.pop(worker_id)
        for model in ws.view.models:
            self.pools[model].leave(worker_id)

    def repush(self, ws: WorkerState) -> None:
        """The worker's heap key changed without a change of load (it joined or left a lane)."""
        for model in ws.view.models:
            self.pools[model].push(ws)

    # -- jobs --------------------------------------------------------------------------

    def assign(self, job: JobView, ws: WorkerState, level: int, now: float) -> AssignedJob:
        before = ws.used_slots()
        item = AssignedJob(job, now, kv_need(job), level)
        ws.left.discard(job.job_id)  # back on this engine: a beat counting it is right again
        ws.add(item, now, self.config.headroom_tau_s)
        self._where[job.job_id] = ws.worker_id
        self._touch(ws, before, +1 if item.is_realtime else 0)
        if item.is_realtime:
            self._awaiting(ws, +1, job.prompt_tokens)
        if item.is_realtime:
            rt_start.note_realtime(ws, job, now, self.config.dispatch_lead_s)
        if job.adapter is not None:
            load_s = ws.view.adapter_load_s  # this engine's own, else the configured figure
            ws.adapters.ledger.use(
                job.adapter, now, self.config.adapter_load_s if load_s is None else load_s,
                cpu_capacity(ws.view),
            )
        return item

    def release(self, job_id: str, now: float) -> AssignedJob | None:
        """The job no longer holds room on its worker (finished, preempted, back in the queue);
        returns what it held, or None when it was not assigned or its worker is gone."""
        worker_id = self._where.pop(job_id, None)
        ws = self.workers.get(worker_id) if worker_id is not None else None
        if ws is None:
            return None
        before = ws.used_slots()
        item = ws.remove(job_id, now, self.config.headroom_tau_s)
        if item is not None:
            self._touch(ws, before, -1 if item.is_realtime else 0)
            if item.is_realtime and not item.first_token:
                self._awaiting(ws, -1, -item.job.prompt_tokens)
        return item

    def first_token(self, job_id: str) -> None:
        """The job's first token came: a realtime job's prefill leaves the engine's queue."""
        worker_id = self._where.get(job_id)
        ws = self.workers.get(worker_id) if worker_id is not None else None
        item = ws.first_token(job_id) if ws is not None else None
        if ws is not None and item is not None:
            self._awaiting(ws, -1, -item.job.prompt_tokens)

    def left_engine(self, job_id: str, worker_id: str) -> None:
        """The last heartbeat counted this job in ``running``: it no longer does. Without
        this the slot stays taken until the next beat (a second or two of an idle slot per
        finished job under a batch backlog)."""
        ws = self.workers.get(worker_id)
        if ws is None:
            return
        ws.left.add(job_id)
        if job_id not in ws.view.running_ids:
            return
        before = ws.used_slots()
        ws.view.running_ids = ws.view.running_ids - {job_id}
        ws.view.running = max(0, ws.view.running - 1)
        ws.load_version += 1
        self._touch(ws, before, 0)

    @staticmethod
    def _adapters_reported(ws: WorkerState, now: float) -> None:
        """A beat that reports LoRA (its slots) says which adapters the engine holds."""
        view = ws.view
        if view.max_loras > 0:
            ws.adapters.ledger.reconcile(view.adapters, ws.adapters.jobs, now, cpu_capacity(view))

    def _touch(self, ws: WorkerState, used_before: int, rt_delta: int) -> None:
        delta = ws.used_slots() - used_before
        for model in ws.view.models:
            pool = self.pools[model]
            pool.used_total += delta
            pool.rt_inflight += rt_delta
            pool.push(ws)

    def _awaiting(self, ws: WorkerState, jobs: int, tokens: int) -> None:
        for model in ws.view.models:
            pool = self.pools[model]
            pool.rt_engine_queued += jobs
            pool.rt_engine_prefill += tokens


def _without_left(view: WorkerView, ws: WorkerState) -> WorkerView:
    """The beat less the jobs known to have left the engine. A beat that no longer counts a
    job has seen it go: it is forgotten then (and when the job is assigned here again)."""
    ws.left &= view.running_ids
    if not ws.left:
        return view
    return replace(view, running_ids=view.running_ids - ws.left,
                   running=max(0, view.running - len(ws.left)))
