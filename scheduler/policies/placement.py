"""Placement: which worker serving a job's model takes it, and the room kept for realtime.

- Realtime goes to the worker where its first token is predicted soonest (``rt_start``),
  among the least loaded that fit plus the one its prompt prefix is affine to
  (``Pool.affinity``); with ``rt_earliest_start`` off, it is placed like batch.
- Batch goes to its prefix's affine worker, else the least loaded, and never into the
  realtime reserve (``Headroom``) of a worker.
- A job with a LoRA adapter goes where the adapter is warm, unless that costs realtime its
  first token (``adapters``, ``adapter_placement``); ``adapter_aware`` off ignores adapters.
- With ``adapter_hold``, an adapter job that every candidate worker is crowded out for
  waits in the queue instead (``holds_back``, ``adapter_hold``).
- With ``rt_lane``, realtime goes to a lane worker first, and batch uses a lane worker only
  within the lane's batch allowance (``lane.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from scheduler.policies import adapter_hold, adapter_placement, rt_start
from scheduler.policies.config import FairwayConfig
from scheduler.policies.fleet import Fleet
from scheduler.policies.lane import LaneConfig, RealtimeLanes
from scheduler.policies.pool import Pool
from scheduler.policies.workers import Headroom, WorkerState, kv_need
from scheduler.types import JobClass, JobView


class Placer:
    def __init__(self, config: FairwayConfig, fleet: Fleet) -> None:
        self.config = cfg = config
        self._fleet = fleet
        self.headroom = Headroom(
            cfg.headroom_tau_s,
            cfg.headroom_k,
            cfg.headroom_min_slots,
            cfg.headroom_max_frac,
            cfg.headroom_enabled,
            cfg.headroom_hold_s,
            cfg.headroom_hold_gaps,
        )
        self.lanes: RealtimeLanes | None = None
        if cfg.rt_lane:
            self.lanes = RealtimeLanes(
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

    def note_realtime(self, job: JobView, now: float) -> None:
        """A realtime job arrived: the reserve and the lane size follow realtime's load."""
        self.headroom.note_realtime(job)
        if self.lanes is not None:
            self.lanes.note_realtime(job.model, now)

    def lane_joiners(self, now: float) -> Iterator[WorkerState]:
        """Resize every pool's realtime lane, yielding the workers that join it. A pool is
        resized only once the caller is done with the previous pool's joiners (clearing
        them of batch changes the load the next resize reads)."""
        if self.lanes is None:
            return
        for pool in list(self._fleet.pools.values()):
            yield from self.lanes.resize(pool, now, self._fleet.repush)

    def place(self, job: JobView, level: int, now: float) -> WorkerState | None:
        """The worker that takes ``job`` at ``level`` now, or None when none has room."""
        pool = self._fleet.pools.get(job.model)
        if pool is None or not pool.workers:
            return None
        if self.lanes is not None and job.job_class is JobClass.REALTIME:
            member = self._lane_member(self.lanes, job, now)
            if member is not None:
                return member
        return self._pool_member(pool, job, level, now)

    def holds_back(self, job: JobView, level: int, now: float, escalated: bool) -> bool:
        """Whether an adapter job waits in the queue this pass rather than go where its
        adapter would wait for a slot (``adapter_hold``); the candidates are
        ``_adapter_member``'s. Realtime served by a lane is never held."""
        cfg = self.config
        if job.adapter is None or not (cfg.adapter_hold and cfg.adapter_aware):
            return False
        if self.lanes is not None and job.job_class is JobClass.REALTIME:
            return False
        pool = self._fleet.pools.get(job.model)
        if pool is None or not pool.workers:
            return False
        limit = cfg.placement_scan_limit
        candidates = pool.fitting(self._room_for(pool, job, level, now), limit, want=limit)
        return adapter_hold.must_wait(candidates, job, job.adapter, now, cfg,
                                      pool.cost or cfg.default_cost, escalated,
                                      pool.adapter_load_s(cfg.adapter_load_s))

    def room_left(self, model: str, level: int, now: float) -> bool:
        """Whether some worker of the model could still take a job of this level. A pass
        stops trying the model's queue when none could."""
        pool = self._fleet.pools.get(model)
        if pool is None:
            return False

        lanes = self.lanes

        def any_slot(ws: WorkerState) -> bool:
            if level == 1 and lanes is not None and not lanes.batch_may_use(ws, 0):
                return False
            reserve = 0 if level == 0 else self._reserve(ws, pool, now)[0]
            return ws.free_slots() - 1 >= reserve

        return pool.least_loaded(any_slot, self.config.placement_scan_limit) is not None

    def _lane_member(
        self, lanes: RealtimeLanes, job: JobView, now: float
    ) -> WorkerState | None:
        need = kv_need(job)
        members = [ws for ws in lanes.members(job.model) if ws.fits(need)]
        if not members:
            return None
        # A worker still finishing the batch its joining preempted goes last.
        ready = [ws for ws in members if not lanes.clearing(ws)] or members
        if self.config.rt_earliest_start:
            return rt_start.earliest_first_token(ready, job, now, self.config.dispatch_lead_s, None)
        return min(ready, key=lambda ws: (ws.load(), ws.worker_id))

    def _pool_member(
        self, pool: Pool, job: JobView, level: int, now: float
    ) -> WorkerState | None:
        cfg = self.config
        fits = self._room_for(pool, job, level, now)
        realtime = job.job_class is JobClass.REALTIME
        timed = realtime and cfg.rt_earliest_start
        if job.adapter is not None and cfg.adapter_aware:
            return self._adapter_member(pool, job, job.adapter, fits, timed, now)
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
            if affine is not None and not timed:
                return affine
        if timed:
            candidates = pool.fitting(fits, cfg.placement_scan_limit, want=cfg.rt_candidates)
            if affine is not None and affine not in candidates:
                candidates.append(affine)
            if not candidates:
                return None
            return rt_start.earliest_first_token(candidates, job, now, cfg.dispatch_lead_s, affine)
        return pool.least_loaded(fits, cfg.placement_scan_limit)

    def _adapter_member(
        self, pool: Pool, job: JobView, adapter: str, fits: Callable[[WorkerState], bool],
        timed: bool, now: float,
    ) -> WorkerState | None:
        """Among the ``placement_scan_limit`` least loaded that fit: an adapter's prefix
        cache is its own (the cache salt covers it), so warmth decides, not prefix affinity."""
        cfg = self.config
        limit = cfg.placement_scan_limit
        candidates = pool.fitting(fits, limit, want=limit)
        if not candidates:
            return None
        if timed:
            return adapter_placement.earliest_first_token(
                candidates, job, adapter, now, cfg.dispatch_lead_s,
                pool.adapter_load_s(cfg.adapter_load_s),
            )
        return adapter_placement.warm_first(candidates, adapter)

    def _room_for(self, pool: Pool, job: JobView, level: int, now: float
                  ) -> Callable[[WorkerState], bool]:
        """Whether a worker has room for the job: level 0 may use the realtime reserve; batch
        may not, nor a lane worker beyond the lane's batch allowance."""
        need = kv_need(job)
        lanes = self.lanes if level == 1 else None

        def fits(ws: WorkerState) -> bool:
            if level == 0:
                return ws.fits(need)
            if lanes is not None and not lanes.batch_may_use(ws, job.prompt_tokens):
                return False
            slots, kv = self._reserve(ws, pool, now)
            return ws.fits(need, slots, kv)

        return fits

    def _reserve(self, ws: WorkerState, pool: Pool, now: float) -> tuple[int, int]:
        """The realtime reserve batch must leave free on ``ws``: none while at least
        ``headroom_yield_waves`` pool-fulls of batch wait behind the job being placed. A slot
        held then is throughput the flood never gets back: with jobs of one length, its late
        start shifts every later job in it, and the flood ends up to a job's time later; a
        realtime arrival takes a batch job's slot instead (it parks with its checkpoint and
        resumes from it). With less waiting, the flood's tail has idle slots to absorb a held
        one, and the reserve spares batch the preemptions."""
        if pool.batch_queued >= self.config.headroom_yield_waves * max(1, pool.slots_total):
            return 0, 0
        return self.headroom.reserve(ws, now)
