"""Fairway's placement half: which worker takes a job, victims when realtime finds no room,
and the realtime lane's upkeep (``lane.py``). A mixin of ``FairwayPolicy``, which owns the
ledger (``_assign``/``_unassign``) these methods call.
"""

from __future__ import annotations

import heapq

from scheduler.policies import rt_start
from scheduler.policies.config import FairwayConfig
from scheduler.policies.lane import RealtimeLanes
from scheduler.policies.placement import Pool
from scheduler.policies.victims import VictimPlan, choose_victims, slack_s, victim_key
from scheduler.policies.workers import AssignedJob, Headroom, WorkerState, kv_need
from scheduler.types import Decision, JobClass, JobView, Preempt, Reject


class PlacementMixin:
    config: FairwayConfig
    _pools: dict[str, Pool]
    _headroom: Headroom
    _lanes: RealtimeLanes | None
    _escalated: set[str]

    def _assign(
        self, job: JobView, ws: WorkerState, level: int, now: float, out: list[Decision]
    ) -> None:
        raise NotImplementedError

    def _unassign(self, job_id: str, *, refund: bool) -> AssignedJob | None:
        raise NotImplementedError

    def _resize_lanes(self, lanes: RealtimeLanes, now: float, out: list[Decision]) -> None:
        """Grow or shrink each pool's lane; a worker that joins is cleared of batch beyond
        ``lane_batch_slots`` (victim key order, never batch short of slack)."""
        cfg = self.config
        for pool in list(self._pools.values()):
            for ws in lanes.resize(pool, now, self._repush):
                batch_items = [item for item in ws.jobs.values() if not item.is_realtime]
                excess = len(batch_items) - cfg.lane_batch_slots
                if excess <= 0 or not cfg.preemption_enabled:
                    continue
                keyed = sorted(
                    (victim_key(item, ws, now, cfg.default_batch_window_s), item)
                    for item in batch_items
                    if slack_s(item, ws, now, cfg.default_batch_window_s)
                    >= cfg.escalation_margin_s
                )
                for _, item in keyed[:excess]:
                    out.append(Preempt(item.job.job_id, ws.worker_id, "realtime_lane"))
                    self._unassign(item.job.job_id, refund=False)

    def _repush(self, ws: WorkerState) -> None:
        for model in ws.view.models:
            self._pools[model].push(ws)

    def _try_place(self, job: JobView, level: int, now: float, out: list[Decision]) -> bool:
        cfg = self.config
        pool = self._pools.get(job.model)
        ws = self._place(job, level, now)
        if job.job_class is JobClass.REALTIME and cfg.preemption_enabled and pool:
            plan = self._realtime_victims(job, pool, ws, now)
            if plan is not None:
                for victim in plan.victims:
                    out.append(Preempt(victim.job.job_id, plan.worker.worker_id, "realtime"))
                    self._unassign(victim.job.job_id, refund=False)
                self._assign(job, plan.worker, level, now, out)
                return True
        if ws is not None:
            self._assign(job, ws, level, now, out)
            return True
        if job.job_id in self._escalated and job.priority == cfg.flex_priority:
            self._escalated.discard(job.job_id)
            out.append(Reject(job.job_id, "flex_deadline", cfg.min_retry_after_s))
            return True
        return False

    def _realtime_victims(
        self, job: JobView, pool: Pool, fit: WorkerState | None, now: float
    ) -> VictimPlan | None:
        """Batch to take back for a realtime job. Nothing fits: the best plan among the
        examined workers. ``fit`` has room (earliest start only): a plan on a worker whose step
        ends sooner, and only if its first token there, plus its victims' recompute weighed at
        ``victim_lost_weight``, still beats ``fit``'s by ``rt_preempt_min_gain_s``. Plans cost
        a sort of the worker's jobs, so at most ``rt_preempt_scan`` such workers get one."""
        cfg = self.config
        lead, gain = cfg.dispatch_lead_s, cfg.rt_preempt_min_gain_s
        workers = list(pool.workers.values())[: cfg.victim_scan_limit]
        worth = 0.0
        if fit is not None:
            if not cfg.rt_earliest_start or (
                rt_start.predicted_start(fit, now, lead) <= now + lead + gain
            ):
                return None  # the roomy worker starts it about now: nothing to gain
            worth = rt_start.predicted_first_token(fit, job, now, lead) - gain
            others = [w for w in workers if w is not fit]
            timed = [(rt_start.predicted_first_token(w, job, now, lead), w) for w in others]
            sooner = [(at, w.worker_id, w) for at, w in timed if at < worth]
            workers = [w for _, _, w in heapq.nsmallest(cfg.rt_preempt_scan, sooner)]
        lost_s = cfg.victim_lost_weight * (pool.cost or cfg.default_cost).prefill_per_token_s
        plan = choose_victims(
            workers,
            kv_need(job),
            now,
            cfg.default_batch_window_s,
            cfg.escalation_margin_s,
            (lambda w: rt_start.predicted_first_token(w, job, now, lead))
            if cfg.rt_earliest_start
            else None,
            lost_s,
        )
        if plan is None or fit is None:
            return plan
        at = rt_start.predicted_first_token(plan.worker, job, now, lead)
        return plan if at + lost_s * plan.work_lost < worth else None

    def _place(self, job: JobView, level: int, now: float) -> WorkerState | None:
        pool = self._pools.get(job.model)
        if pool is None or not pool.workers:
            return None
        need = kv_need(job)
        cfg = self.config
        lanes = self._lanes
        if lanes is not None and job.job_class is JobClass.REALTIME:
            members = [ws for ws in lanes.members(job.model) if ws.fits(need)]
            if members:  # a worker still finishing the batch its joining preempted goes last
                ready = [ws for ws in members if not lanes.clearing(ws)] or members
                if cfg.rt_earliest_start:
                    return rt_start.earliest_first_token(
                        ready, job, now, cfg.dispatch_lead_s, None
                    )
                return min(ready, key=lambda ws: (ws.load(), ws.worker_id))
        lane_batch = lanes is not None and level == 1

        def fits(ws: WorkerState) -> bool:
            if level == 0:
                return ws.fits(need)
            if lane_batch and lanes is not None and not lanes.batch_may_use(ws, job.prompt_tokens):
                return False
            slots, kv = self._headroom.reserve(ws, now)
            return ws.fits(need, slots, kv)

        realtime = job.job_class is JobClass.REALTIME
        affine: WorkerState | None = None
        if job.prefix_key is not None:
            affine = pool.affinity(
                job.prefix_key,
                fits,
                cfg.affinity_load_factor,
                cfg.affinity_slack,
                cfg.affinity_walk_limit,
                cfg.ring_vnodes,
                realtime=realtime,
            )
            if affine is not None and not (realtime and cfg.rt_earliest_start):
                return affine
        if realtime and cfg.rt_earliest_start:
            candidates = pool.fitting(fits, cfg.placement_scan_limit, want=cfg.rt_candidates)
            if affine is not None and affine not in candidates:
                candidates.append(affine)
            if not candidates:
                return None
            return rt_start.earliest_first_token(candidates, job, now, cfg.dispatch_lead_s, affine)
        return pool.least_loaded(fits, cfg.placement_scan_limit)

    def _room_left(self, model: str, level: int, now: float) -> bool:
        pool = self._pools.get(model)
        if pool is None:
            return False

        lanes = self._lanes

        def any_slot(ws: WorkerState) -> bool:
            if level == 1 and lanes is not None and not lanes.batch_may_use(ws, 0):
                return False
            reserve = 0 if level == 0 else self._headroom.reserve(ws, now)[0]
            return ws.free_slots() - 1 >= reserve

        return pool.least_loaded(any_slot, self.config.placement_scan_limit) is not None
