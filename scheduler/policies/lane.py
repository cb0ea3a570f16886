"""The realtime lane: workers kept (nearly) clear of batch while realtime is about.

Sharing an engine step with a full batch makes a realtime prefill wait for the step in flight
and then run beside every batch decode: its TTFT is several times what it is alone. The lane
serves realtime on workers that batch may barely use, so its steps look like realtime alone:

- **Size.** Per model pool, ``ceil((m + k * sqrt(m)) / lane_rt_per_worker)`` workers, where
  ``m`` is an exponentially weighted mean (time constant ``headroom_tau_s``) of the realtime
  jobs in flight or queued in the pool, sampled at every ``schedule`` pass; at least 1 while
  realtime was seen in the last ``lane_hold_s``, else 0; at most ``lane_max_frac`` of the
  pool's workers (so a one-worker pool never has a lane and batch keeps a worker).
- **Joining.** A worker that joins keeps at most ``lane_batch_slots`` batch jobs (the most
  advanced ones, by the victim key); the rest are preempted at once. Batch whose slack is
  below the escalation margin is never preempted for it.
- **Use.** Realtime goes to the lane worker that fits where its first token is predicted
  soonest (``rt_start``; the least loaded with ``rt_earliest_start`` off), one still finishing
  the batch its joining preempted last. All lane workers are looked at (at most
  ``lane_max_frac * W``, a handful in practice); when none fits, realtime is placed as
  without a lane. Batch (not escalated) may take a lane worker's slot only while that worker holds
  fewer than ``lane_batch_slots`` batch jobs and the job's prompt is at most
  ``lane_batch_max_prompt`` tokens (so a lane step stays short); escalated batch may use the
  lane when nothing else fits (its deadline beats isolation).
- **Leaving.** When the target drops, lane workers without realtime leave first; the lane
  is dissolved ``lane_hold_s`` after realtime was last seen, and batch fills it again.

Lane workers sort after all others in the pool's least-loaded heap (their key is lifted by
1.0), so batch placement still looks at ``placement_scan_limit`` non-lane candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.policies.pool import Pool
from scheduler.policies.workers import WorkerState


@dataclass(slots=True)
class LaneConfig:
    rt_per_worker: float
    k: float
    max_frac: float
    hold_s: float
    tau_s: float
    batch_slots: int
    batch_max_prompt: int
    min_workers: int = 0


@dataclass(slots=True)
class Lane:
    """One model pool's lane."""

    members: dict[str, WorkerState] = field(default_factory=dict)
    ewma: float = 0.0
    ewma_at: float = 0.0
    last_rt_at: float = -math.inf
    below_since: float | None = None  # since when the target is below the lane's size

    def target(self, pool: Pool, now: float, cfg: LaneConfig) -> int:
        active = pool.rt_inflight + pool.rt_queued
        dt = now - self.ewma_at
        if dt > 0:
            decay = math.exp(-dt / cfg.tau_s) if cfg.tau_s > 0 else 0.0
            self.ewma = active + (self.ewma - active) * decay
            self.ewma_at = now
        if active > 0:
            self.last_rt_at = now
        cap = int(cfg.max_frac * len(pool.workers))
        if len(pool.workers) - cap < 1:
            cap = len(pool.workers) - 1
        if now - self.last_rt_at > cfg.hold_s:
            return max(0, min(cap, cfg.min_workers))
        m = max(self.ewma, float(active))
        want = math.ceil((m + cfg.k * math.sqrt(m)) / max(1e-9, cfg.rt_per_worker))
        return max(0, min(cap, max(1, want)))


class RealtimeLanes:
    def __init__(self, cfg: LaneConfig) -> None:
        self.cfg = cfg
        self._lanes: dict[str, Lane] = {}

    def note_realtime(self, model: str, now: float) -> None:
        lane = self._lanes.setdefault(model, Lane(ewma_at=now))
        lane.last_rt_at = now

    def resize(
        self, pool: Pool, now: float, moved: Callable[[WorkerState], None]
    ) -> list[WorkerState]:
        """Grow or shrink ``pool``'s lane; returns the workers that just joined it.

        ``moved(ws)`` is called for each worker that joins or leaves (its heap key changed)."""
        lane = self._lanes.get(pool.model)
        if lane is None:
            if self.cfg.min_workers <= 0:
                return []
            lane = self._lanes[pool.model] = Lane(ewma_at=now)
        for worker_id in [w for w in lane.members if w not in pool.workers]:
            del lane.members[worker_id]  # the worker left the pool
        target = lane.target(pool, now, self.cfg)
        if target >= len(lane.members):
            lane.below_since = None
        elif target > 0:  # shrink only after the load stayed lower for hold_s (no churn)
            lane.below_since = now if lane.below_since is None else lane.below_since
            if now - lane.below_since < self.cfg.hold_s:
                target = len(lane.members)
        if len(lane.members) > target:
            # Leave: workers without realtime first, then the least realtime (O(L log L)).
            order = sorted(lane.members.values(), key=lambda ws: (ws.rt_count, ws.worker_id))
            for ws in order[: len(lane.members) - target]:
                if target > 0 and ws.rt_count > 0:
                    break  # keep realtime's worker while the lane is still wanted
                self._set(lane, ws, False, moved)
        joined: list[WorkerState] = []
        while len(lane.members) < target:
            pick = pool.least_loaded(lambda w: not w.lane, len(lane.members) + 16)
            if pick is None:
                break
            self._set(lane, pick, True, moved)
            joined.append(pick)
        return joined

    def members(self, model: str) -> list[WorkerState]:
        lane = self._lanes.get(model)
        return list(lane.members.values()) if lane is not None else []

    @staticmethod
    def clearing(ws: WorkerState) -> bool:
        """The engine still runs more than the policy placed there: preempted batch that
        leaves at its step end (the next heartbeat shows it gone)."""
        return ws.view.running > len(ws.jobs)

    def batch_may_use(self, ws: WorkerState, prompt_tokens: int) -> bool:
        if not ws.lane:
            return True
        batch_held = len(ws.jobs) - ws.rt_count
        return batch_held < self.cfg.batch_slots and prompt_tokens <= self.cfg.batch_max_prompt

    @staticmethod
    def _set(
        lane: Lane, ws: WorkerState, member: bool, moved: Callable[[WorkerState], None]
    ) -> None:
        ws.lane = member
        if member:
            lane.members[ws.worker_id] = ws
        else:
            lane.members.pop(ws.worker_id, None)
        ws.load_version += 1
        moved(ws)
