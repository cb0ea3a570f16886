"""A model's pool: the workers serving it, and the two ways ``placement.Placer`` picks one
that has room.

1. Prefix affinity by consistent hashing with bounded load: a job with a ``prefix_key`` goes
   to the first worker clockwise from the key's hash on the model's ring that has room and
   whose in-flight count is at most ``c * mean + slack`` (c = ``affinity_load_factor``).
   Load balance overrides affinity exactly when that bound fails: the walk moves on, and
   after ``affinity_walk_limit`` distinct workers it gives up on affinity.
2. Otherwise the least loaded worker (by the tighter of slot and KV use) that has room.

Least loaded is a lazy heap per model, keyed by load and the worker's version; a placement
looks at up to ``placement_scan_limit`` valid entries, so it costs O(limit * log W) rather
than O(W). Past the limit it may miss a worker that would fit (a heavily loaded one whose
free KV happens to be large): that is the documented degradation.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.cost_model import CostModel
from scheduler.policies.workers import WorkerState


def stable_hash(text: str) -> int:
    # Python's hash() is salted per process; the ring must agree across restarts.
    return zlib.crc32(text.encode())


@dataclass(slots=True)
class Pool:
    """The workers that serve one model."""

    model: str
    workers: dict[str, WorkerState] = field(default_factory=dict)
    heap: list[tuple[float, int, str]] = field(default_factory=list)
    ring: list[tuple[int, str]] = field(default_factory=list)
    ring_dirty: bool = True
    slots_total: int = 0
    used_total: int = 0
    rt_inflight: int = 0
    rt_queued: int = 0
    rt_queued_prefill: int = 0
    batch_queued: int = 0  # batch class waiting at level 1 (not escalated)
    # Realtime assigned to the pool's engines whose first token has not come: its prefill
    # still waits (or runs) inside the engines, ahead of any realtime sent there next.
    rt_engine_queued: int = 0
    rt_engine_prefill: int = 0
    kv_capacity_max: int = 0
    cost: CostModel | None = None
    # Each member's measured LoRA adapter load (the median of its engine's recent loads, as
    # its beat says), and their median, worked out again only after a change.
    adapter_loads: dict[str, float] = field(default_factory=dict)
    _adapter_load_median: float | None = None

    def push(self, ws: WorkerState) -> None:
        heapq.heappush(self.heap, (ws.heap_key(), ws.load_version, ws.worker_id))
        if len(self.heap) > 4 * len(self.workers) + 64:
            self.heap = [
                (w.heap_key(), w.load_version, w.worker_id) for w in self.workers.values()
            ]
            heapq.heapify(self.heap)

    def join(self, ws: WorkerState) -> None:
        self.workers[ws.worker_id] = ws
        self.ring_dirty = True
        self.cost = self.cost or ws.cost
        self.slots_total += ws.view.max_slots
        self.used_total += ws.used_slots()
        self.rt_engine_queued += ws.rt_awaiting
        self.rt_engine_prefill += ws.rt_awaiting_prefill
        self.kv_capacity_max = max(self.kv_capacity_max, ws.view.kv_capacity_tokens)
        self._note_adapter_load(ws)
        self.push(ws)

    def leave(self, worker_id: str) -> None:
        ws = self.workers.pop(worker_id, None)
        if ws is None:
            return
        self.ring_dirty = True
        self.slots_total -= ws.view.max_slots
        self.used_total -= ws.used_slots()
        self.rt_inflight -= ws.rt_count
        self.rt_engine_queued -= ws.rt_awaiting
        self.rt_engine_prefill -= ws.rt_awaiting_prefill
        self.kv_capacity_max = max(
            (w.view.kv_capacity_tokens for w in self.workers.values()), default=0
        )
        if self.adapter_loads.pop(worker_id, None) is not None:
            self._adapter_load_median = None

    def update(self, ws: WorkerState, old_slots: int, old_used: int) -> None:
        """A member's heartbeat changed its size or load."""
        self.slots_total += ws.view.max_slots - old_slots
        self.used_total += ws.used_slots() - old_used
        self.kv_capacity_max = max(self.kv_capacity_max, ws.view.kv_capacity_tokens)
        self._note_adapter_load(ws)
        self.push(ws)

    def adapter_load_s(self, default: float) -> float:
        """What loading a LoRA adapter takes on this pool's engines: the median of what its
        workers measured, or ``default`` (FairwayConfig.adapter_load_s) before any did."""
        if not self.adapter_loads:
            return default
        if self._adapter_load_median is None:
            self._adapter_load_median = statistics.median(self.adapter_loads.values())
        return self._adapter_load_median

    def _note_adapter_load(self, ws: WorkerState) -> None:
        measured = ws.view.adapter_load_s
        if measured is None:
            changed = self.adapter_loads.pop(ws.worker_id, None) is not None
        else:
            changed = self.adapter_loads.get(ws.worker_id) != measured
            self.adapter_loads[ws.worker_id] = measured
        if changed:
            self._adapter_load_median = None

    def mean_used(self) -> float:
        return self.used_total / max(1, len(self.workers))

    def least_loaded(
        self, fits: Callable[[WorkerState], bool], scan_limit: int
    ) -> WorkerState | None:
        found = self.fitting(fits, scan_limit, want=1)
        return found[0] if found else None

    def fitting(
        self, fits: Callable[[WorkerState], bool], scan_limit: int, want: int
    ) -> list[WorkerState]:
        """Up to ``want`` workers that fit, least loaded first, among the ``scan_limit`` least
        loaded: O(scan_limit log W)."""
        popped: list[tuple[float, int, str]] = []
        found: list[WorkerState] = []
        while self.heap and len(popped) < scan_limit and len(found) < want:
            entry = heapq.heappop(self.heap)
            ws = self.workers.get(entry[2])
            if ws is None or ws.load_version != entry[1]:
                continue  # stale: the worker left or its load changed since
            popped.append(entry)
            if fits(ws):
                found.append(ws)
        for entry in popped:
            heapq.heappush(self.heap, entry)
        return found

    def affinity(
        self,
        key: str,
        fits: Callable[[WorkerState], bool],
        load_factor: float,
        slack: int,
        walk_limit: int,
        vnodes: int,
        realtime: bool = False,
    ) -> WorkerState | None:
        """``realtime``: bound the realtime in flight rather than all of it. Batch is
        preemptible and kept out of realtime's way by the engine's realtime guard, so in a pool
        full of batch every worker looks equally loaded, and the plain bound would send every
        realtime job sharing a prefix to one worker to queue behind each other's prefills."""
        if self.ring_dirty:
            self._build_ring(vnodes)
        if not self.ring:
            return None
        mean = self.rt_inflight / max(1, len(self.workers)) if realtime else self.mean_used()
        bound = load_factor * mean + slack
        start = bisect.bisect_left(self.ring, (stable_hash(key), ""))
        seen: set[str] = set()
        for i in range(len(self.ring)):
            worker_id = self.ring[(start + i) % len(self.ring)][1]
            if worker_id in seen:
                continue
            seen.add(worker_id)
            ws = self.workers[worker_id]
            load = ws.rt_count if realtime else ws.used_slots()
            if load <= bound and fits(ws):
                return ws
            if len(seen) >= walk_limit:
                break
        return None

    def _build_ring(self, vnodes: int) -> None:
        self.ring = sorted(
            (stable_hash(f"{worker_id}#{i}"), worker_id)
            for worker_id in self.workers
            for i in range(vnodes)
        )
        self.ring_dirty = False
