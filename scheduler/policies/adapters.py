"""LoRA adapters in placement: which worker will hold which adapter, and what running a job's
adapter on a worker costs.

An engine batches at most ``max_loras`` distinct adapters per step (vLLM's GPU slots: a
request for another adapter waits) and keeps ``max_cpu_loras`` loaded, evicting the least
recently used; an adapter it does not hold is loaded first (``adapter_load_s``), and that
load holds up the adapter's requests on that engine only.

The policy keeps a ledger per worker (``AdapterLedger``): the adapters it will hold after
the policy's own assignments, least recently used first, bounded like the engine's cache,
each with the time it is ready there. A heartbeat that reports the engine's adapters
replaces the ledger with the report plus the adapters of jobs assigned since (the engine
may not have started their load); a beat that says nothing of LoRA (``max_loras`` 0)
leaves the ledger to the assignments. Because the first job of a cold adapter marks it
warm on its worker at once, the rest of a burst finds it there and follows, rather than
loading it on every worker.

Placement with an adapter (``FairwayConfig.adapter_aware``):

- first the workers where the adapter can batch at once: it runs there already, or a slot
  is free (fewer distinct adapters among the worker's jobs than ``max_loras``); then those
  where it runs but the worker holds jobs of more adapters than slots (more of it prolongs
  the others' wait: an engine lets a waiting adapter in only once every request of a
  running one is done); then the rest, fewest adapters in excess first (``AdapterUse.tier``);
- among equals, realtime (earliest predicted first token, ``rt_start``) by its predicted
  first token once the adapter is ready there (0 when ready, what is left of a load in
  progress, ``adapter_load_s`` when cold): a warm worker wins unless a cold one's start
  after the load is sooner; other jobs go to a warm worker, least loaded first, else the
  least loaded (the adapter is loaded there).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.types import WorkerView

# vLLM's defaults when a worker does not say: one adapter per batch, as many kept loaded.
VLLM_MAX_LORAS = 1


def lora_slots(view: WorkerView) -> int:
    """Distinct adapters one engine step may batch."""
    return view.max_loras if view.max_loras > 0 else VLLM_MAX_LORAS


def cpu_capacity(view: WorkerView) -> int:
    """Adapters the engine keeps loaded (vLLM: ``max_cpu_loras`` >= ``max_loras``)."""
    return max(view.max_cpu_loras, lora_slots(view))


@dataclass(slots=True)
class AdapterLedger:
    """One worker's adapters by the policy's reckoning: adapter -> when it is ready there
    (the policy's clock), least recently used first. Never longer than the capacity it was
    last given."""

    ready_at: OrderedDict[str, float] = field(default_factory=OrderedDict)
    loads: int = 0  # adapter loads the policy's own assignments caused here

    def holds(self, adapter: str) -> bool:
        return adapter in self.ready_at

    def wait_s(self, adapter: str, at: float, load_s: float) -> float:
        """From ``at`` until the adapter could run here: the load when it is cold."""
        ready = self.ready_at.get(adapter)
        return load_s if ready is None else max(0.0, ready - at)

    def use(self, adapter: str, now: float, load_s: float, capacity: int) -> None:
        """A job with ``adapter`` was sent here: it is the most recently used, and is loaded
        from ``now`` when it was not held."""
        if adapter in self.ready_at:
            self.ready_at.move_to_end(adapter)
        else:
            self.ready_at[adapter] = now + load_s
            self.loads += 1
        self._trim(capacity)

    def reconcile(
        self, reported: Iterable[str], in_use: Iterable[str], now: float, capacity: int
    ) -> None:
        """The engine's report (least recently used first), then the adapters of jobs sent
        here and not finished, most recent last: those the report may predate."""
        held = OrderedDict((a, min(now, self.ready_at.get(a, now))) for a in reported)
        for adapter in in_use:
            if adapter not in held:
                held[adapter] = self.ready_at.get(adapter, now)
            held.move_to_end(adapter)
        self.ready_at = held
        self._trim(capacity)

    def _trim(self, capacity: int) -> None:
        while len(self.ready_at) > max(1, capacity):
            self.ready_at.popitem(last=False)


@dataclass(slots=True)
class AdapterUse:
    """A worker's ledger and the adapters of the jobs it holds (for its free slots)."""

    ledger: AdapterLedger = field(default_factory=AdapterLedger)
    jobs: Counter[str] = field(default_factory=Counter)  # adapter -> jobs assigned here

    def tier(self, adapter: str, view: WorkerView) -> tuple[int, int]:
        """How soon ``adapter`` could batch here, best first: it has a slot (0); it runs
        here, but the worker holds jobs of more adapters than it has slots (1), so more of
        it prolongs the others' wait (an engine lets a waiting adapter in only once every
        request of a running one is done); no slot (2), the fewer adapters in excess the
        better."""
        held, slots = len(self.jobs), lora_slots(view)
        if held < slots or (adapter in self.jobs and held <= slots):
            return 0, 0
        return (1, 0) if adapter in self.jobs else (2, held - slots)

    def add(self, adapter: str | None) -> None:
        if adapter is not None:
            self.jobs[adapter] += 1

    def remove(self, adapter: str | None) -> None:
        if adapter is not None:
            self.jobs[adapter] -= 1
            if self.jobs[adapter] <= 0:
                del self.jobs[adapter]
