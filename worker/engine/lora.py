"""LoRA adapters on an engine: what a request names, and the loads an engine makes.

A request that names an adapter carries a `LoraSpec` (the worker fetched its files to a local
folder first, worker.adapters). Before the engine runs it, `AdapterLoads.ensure` makes sure
the adapter is loaded: once per engine even when a burst of requests for a cold adapter
arrives together (the first starts the load, the others wait for that same load), with at
most ``max_concurrent`` loads at a time and each within ``timeout_s``. Loaded adapters are
kept by recency: past ``capacity`` (vLLM's ``max_cpu_loras``), the least recently used one
is unloaded. Both engines use it; only the load itself differs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from worker.engine.base import EngineError


@dataclass(frozen=True, slots=True)
class LoraSpec:
    adapter_id: str  # the adapter's public id: its name inside the engine
    path: str  # a local folder holding adapter_config.json and adapter_model.safetensors
    rank: int

    @property
    def int_id(self) -> int:
        """vLLM's ``lora_int_id``: positive, and the same for the same adapter everywhere."""
        return uuid.UUID(self.adapter_id.removeprefix("lora-")).int % (2**31 - 1) + 1


@dataclass(frozen=True, slots=True)
class LoraConfig:
    """An engine's LoRA settings (from the adapter settings, worker.main)."""

    max_loras: int = 4  # adapters one step may batch (vLLM's slots)
    max_cpu_loras: int = 8  # adapters kept loaded
    max_lora_rank: int = 16
    load_timeout_s: float = 120.0
    concurrent_loads: int = 2
    sim_load_s: float = 0.2  # the sim engine's modelled load time

    def __post_init__(self) -> None:
        if self.max_loras < 1 or self.max_cpu_loras < self.max_loras:
            raise ValueError("max_loras must be >= 1 and max_cpu_loras >= max_loras")


Load = Callable[[LoraSpec], Awaitable[None]]

# Load times kept for the worker's beat (worker.beat): the last few loads of the adapters
# loaded most recently, enough for a last and a median per adapter, small enough to beat.
LOAD_SAMPLES = 8
LOADS_KEPT = 16


class AdapterLoadFailed(EngineError):
    """The adapter could not be loaded (in time): the request fails, the engine lives on."""

    code = "adapter_load_failed"
    param = "model"


class AdapterLoads:
    """Single-flight, bounded, timed adapter loads with least-recently-used residency."""

    def __init__(self, config: LoraConfig, *, load: Load, unload: Load,
                 observe: Callable[[float], None] | None = None) -> None:
        self.config = config
        self._load, self._unload = load, unload
        self.observe = observe  # each load's seconds (the worker's fairway_lora_load_seconds)
        self._resident: OrderedDict[str, LoraSpec] = OrderedDict()  # oldest use first
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._slots = asyncio.Semaphore(config.concurrent_loads)
        self.loads = 0  # loads completed (a burst for one cold adapter adds one)
        # adapter id -> (its last loads' seconds, oldest first; when the last ended, epoch s)
        self._times: OrderedDict[str, tuple[deque[float], float]] = OrderedDict()

    def resident(self) -> list[str]:
        """Loaded adapter ids, most recently used last."""
        return list(self._resident)

    def load_times(self) -> dict[str, dict[str, object]]:
        """Per adapter id, its last loads' seconds (oldest first, at most ``LOAD_SAMPLES``)
        and when the last ended: the ``LOADS_KEPT`` adapters loaded most recently, evicted
        ones included (a cold adapter's load time is what a reader wants to see)."""
        return {adapter: {"seconds": [round(s, 3) for s in seconds], "at": round(at, 3)}
                for adapter, (seconds, at) in self._times.items()}

    def _record(self, adapter_id: str, elapsed: float) -> None:
        seconds, _ = self._times.pop(adapter_id, (deque(maxlen=LOAD_SAMPLES), 0.0))
        seconds.append(elapsed)
        self._times[adapter_id] = (seconds, time.time())
        while len(self._times) > LOADS_KEPT:
            self._times.popitem(last=False)

    async def ensure(self, spec: LoraSpec) -> None:
        if spec.adapter_id in self._resident:
            self._resident.move_to_end(spec.adapter_id)
            return
        pending = self._loading.get(spec.adapter_id)
        if pending is None:
            pending = asyncio.ensure_future(self._load_once(spec))
            self._loading[spec.adapter_id] = pending
            pending.add_done_callback(lambda _: self._loading.pop(spec.adapter_id, None))
        # Shielded: one waiter that gives up (its client left) does not cancel the others'.
        await asyncio.shield(pending)

    async def _load_once(self, spec: LoraSpec) -> None:
        async with self._slots:
            started = time.monotonic()
            try:
                await asyncio.wait_for(self._load(spec), self.config.load_timeout_s)
            except TimeoutError as exc:
                raise AdapterLoadFailed(
                    f"Loading adapter {spec.adapter_id} took longer than "
                    f"{self.config.load_timeout_s:g} s.") from exc
            elapsed = time.monotonic() - started
        self.loads += 1
        self._record(spec.adapter_id, elapsed)
        if self.observe is not None:
            self.observe(elapsed)
        self._resident[spec.adapter_id] = spec
        while len(self._resident) > self.config.max_cpu_loras:
            _, oldest = self._resident.popitem(last=False)
            await self._unload(oldest)
