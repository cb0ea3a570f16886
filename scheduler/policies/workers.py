"""The policy's picture of each worker: the last heartbeat plus what it assigned since.

Room is the pessimistic union of both: a slot is used if the engine reports it or the policy
sent a job there that has not finished, and KV is used if the engine reports it or a job's
reservation (prompt + max_tokens, the most it can grow to) holds it. Placement therefore
never exceeds a worker's capacity, whichever of the two is behind.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

from scheduler.cost_model import CostModel
from scheduler.policies.adapters import AdapterUse
from scheduler.types import JobClass, JobView, WorkerView


@dataclass(slots=True)
class AssignedJob:
    job: JobView
    assigned_at: float
    kv_need: int
    level: int  # 0 = realtime or escalated batch, 1 = batch
    first_token: bool = False  # reported (``SchedulingPolicy.on_first_token``)

    @property
    def is_realtime(self) -> bool:
        return self.job.job_class is JobClass.REALTIME


def kv_need(job: JobView) -> int:
    return job.prompt_tokens + job.max_tokens


@dataclass(slots=True)
class WorkerState:
    view: WorkerView
    cost: CostModel
    jobs: dict[str, AssignedJob] = field(default_factory=dict)
    # Jobs that left this worker's engine while its last heartbeat still counted them: a
    # re-read of that beat counts them again (``Fleet.heartbeat`` drops them from it).
    left: set[str] = field(default_factory=set)
    kv_reserved: int = 0
    rt_count: int = 0
    # Realtime held here whose first token has not been reported, and their prompt tokens.
    rt_awaiting: int = 0
    rt_awaiting_prefill: int = 0
    load_version: int = 0
    # Realtime load seen here, as an exponentially weighted mean over time.
    rt_ewma: float = 0.0
    ewma_at: float = 0.0
    # When the last realtime job held here left (while one is held, rt_count says so).
    rt_left_at: float = -math.inf
    # When realtime last came here, and the mean gap between its arrivals (0: not known yet).
    rt_came_at: float = -math.inf
    rt_gap_s: float = 0.0
    lane: bool = False  # in a realtime lane (lane.py): sorts after every other worker
    # The engine's step clock (``SchedulingPolicy.on_worker_step``) and the realtime prefill
    # this policy has queued there, for realtime's earliest-start placement (rt_start.py).
    step_started_at: float | None = None
    step_s: float = 0.0
    rt_prefill_until: float = 0.0
    # Prefix keys of the last realtime jobs sent here (oldest first): likely in its cache.
    rt_prefixes: OrderedDict[str, None] = field(default_factory=OrderedDict)
    # LoRA adapters held here by the policy's reckoning, and those its jobs use (adapters.py).
    adapters: AdapterUse = field(default_factory=AdapterUse)

    def heap_key(self) -> float:
        return self.load() + (1.0 if self.lane else 0.0)

    @property
    def worker_id(self) -> str:
        return self.view.worker_id

    def used_slots(self) -> int:
        return max(self.view.running, len(self.jobs))

    def free_slots(self) -> int:
        return max(0, self.view.max_slots - self.used_slots())

    def kv_used(self) -> int:
        return max(self.view.kv_used_tokens, self.kv_reserved)

    def kv_free(self) -> int:
        return max(0, self.view.kv_capacity_tokens - self.kv_used())

    def load(self) -> float:
        """Fraction of the tighter of the two resources in use: the least-loaded key."""
        slots = self.used_slots() / max(1, self.view.max_slots)
        kv = self.kv_used() / max(1, self.view.kv_capacity_tokens)
        return max(slots, kv)

    def fits(self, need_kv: int, reserve_slots: int = 0, reserve_kv: int = 0) -> bool:
        return self.free_slots() - 1 >= reserve_slots and self.kv_free() - need_kv >= reserve_kv

    def add(self, item: AssignedJob, now: float, tau_s: float) -> None:
        self.observe(now, tau_s)
        self.jobs[item.job.job_id] = item
        self.kv_reserved += item.kv_need
        self.rt_count += item.is_realtime
        if item.is_realtime:
            self._note_arrival(now)
        self.adapters.add(item.job.adapter)
        if item.is_realtime and not item.first_token:
            self.rt_awaiting += 1
            self.rt_awaiting_prefill += item.job.prompt_tokens
        self.load_version += 1

    def _note_arrival(self, now: float) -> None:
        if self.rt_came_at > -math.inf:
            gap = now - self.rt_came_at
            self.rt_gap_s = gap if self.rt_gap_s == 0 else 0.7 * self.rt_gap_s + 0.3 * gap
        self.rt_came_at = now

    def first_token(self, job_id: str) -> AssignedJob | None:
        """The job's first token came: its prefill no longer waits here. Returns the job when
        this changed what is awaited (a realtime job not reported before), else None."""
        item = self.jobs.get(job_id)
        if item is None or item.first_token:
            return None
        item.first_token = True
        if not item.is_realtime:
            return None
        self.rt_awaiting -= 1
        self.rt_awaiting_prefill -= item.job.prompt_tokens
        return item

    def remove(self, job_id: str, now: float, tau_s: float) -> AssignedJob | None:
        item = self.jobs.pop(job_id, None)
        if item is not None:
            self.observe(now, tau_s)
            self.kv_reserved -= item.kv_need
            self.rt_count -= item.is_realtime
            if item.is_realtime:
                self.rt_left_at = now
            self.adapters.remove(item.job.adapter)
            if item.is_realtime and not item.first_token:
                self.rt_awaiting -= 1
                self.rt_awaiting_prefill -= item.job.prompt_tokens
            self.load_version += 1
        self.view.progress.pop(job_id, None)
        return item

    def observe(self, now: float, tau_s: float) -> None:
        """Advance the EWMA: rt_count was constant since ewma_at, so the decay is exact."""
        dt = now - self.ewma_at
        if dt > 0:
            decay = math.exp(-dt / tau_s) if tau_s > 0 else 0.0
            self.rt_ewma = self.rt_count + (self.rt_ewma - self.rt_count) * decay
            self.ewma_at = now


@dataclass(slots=True)
class Headroom:
    """Realtime reserve: room batch may not take, sized from the realtime load seen."""

    tau_s: float
    k: float
    min_slots: int
    max_frac: float
    enabled: bool = True
    hold_s: float = math.inf  # FairwayConfig.headroom_hold_s
    hold_gaps: float = math.inf  # FairwayConfig.headroom_hold_gaps
    rt_kv_mean: float = 0.0  # EWMA of a realtime job's KV need, for the KV reserve

    def note_realtime(self, job: JobView) -> None:
        need = kv_need(job)
        self.rt_kv_mean = need if self.rt_kv_mean == 0 else 0.9 * self.rt_kv_mean + 0.1 * need

    def reserve(self, ws: WorkerState, now: float) -> tuple[int, int]:
        """(slots, kv tokens) batch must leave free on this worker now."""
        if not self.enabled:
            return 0, 0
        ws.observe(now, self.tau_s)
        mean = ws.rt_ewma
        gone = ws.rt_count == 0 and now - ws.rt_left_at > self.hold(ws)
        target = 0 if gone or mean < 0.05 else math.ceil(mean + self.k * math.sqrt(mean))
        cap = int(self.max_frac * ws.view.max_slots)
        slots = min(cap, max(self.min_slots, target - ws.rt_count))
        return slots, int(slots * self.rt_kv_mean)

    def hold(self, ws: WorkerState) -> float:
        """How long the reserve outlives the last realtime held: ``hold_gaps`` of its mean
        arrival gap (a Poisson stream that went that long without an arrival has likely
        stopped: e^-4 < 2%), at most ``hold_s``."""
        if ws.rt_gap_s <= 0:
            return self.hold_s
        return min(self.hold_s, self.hold_gaps * ws.rt_gap_s)
