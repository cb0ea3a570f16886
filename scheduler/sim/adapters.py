"""LoRA adapters in the simulator: an engine's adapter cache and slots, and Zipf popularity.

An engine with LoRA (``Scenario.lora``) batches sequences of at most ``max_loras`` distinct
adapters at once (vLLM's GPU slots; a sequence for another adapter waits while others run)
and keeps ``max_cpu_loras`` adapters loaded, evicting the least recently used that no
running sequence needs. An adapter it does not hold is loaded when a sequence for it could
otherwise start: ``load_s`` seconds during which that adapter's sequences on this engine
wait (the engine runs everything else meanwhile), and the load holds one of the slots.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_LOAD_S = 0.015  # FairwayConfig.adapter_load_s says where the figure comes from


@dataclass(frozen=True, slots=True)
class LoraSettings:
    max_loras: int = 1  # vLLM's default
    max_cpu_loras: int = 0  # 0: max_loras (vLLM's default)
    load_s: float = DEFAULT_LOAD_S

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise ValueError("lora.max_loras must be >= 1")
        if self.max_cpu_loras < 0:
            raise ValueError("lora.max_cpu_loras must be >= 0")
        if self.load_s < 0:
            raise ValueError("lora.load_s must be >= 0")

    @property
    def cpu_capacity(self) -> int:
        return max(self.max_cpu_loras, self.max_loras)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraSettings:
        extra = set(data) - {"max_loras", "max_cpu_loras", "load_s"}
        if extra:
            raise ValueError(f"unknown lora keys: {sorted(extra)}")
        return cls(int(data.get("max_loras", 1)), int(data.get("max_cpu_loras", 0)),
                   float(data.get("load_s", DEFAULT_LOAD_S)))


class AdapterCache:
    """One engine's loaded adapters: adapter -> when it is ready, least recently used first."""

    def __init__(self, settings: LoraSettings) -> None:
        self.settings = settings
        self.ready_at: OrderedDict[str, float] = OrderedDict()
        self.loads = 0

    def loading(self, now: float) -> set[str]:
        return {a for a, ready in self.ready_at.items() if ready > now}

    def admits(self, adapter: str, running: set[str | None], now: float) -> bool:
        """Whether a sequence for ``adapter`` may start beside ``running``'s adapters: a slot
        for its adapter (the loads in progress hold one each), and the adapter loaded. The
        adapter becomes the most recently used; when absent, its load starts now, evicting
        the least recently used adapter no running sequence or load needs, past capacity."""
        held = {a for a in running if a is not None} | self.loading(now)
        if adapter not in held and len(held) >= self.settings.max_loras:
            return False
        ready = self.ready_at.get(adapter)
        if ready is None:
            ready = self.ready_at[adapter] = now + self.settings.load_s
            self.loads += 1
            self._evict(held | {adapter})
        self.ready_at.move_to_end(adapter)
        return ready <= now

    def next_ready(self, now: float) -> float | None:
        """When the next load in progress ends (the engine must look at its queue then)."""
        return min((r for r in self.ready_at.values() if r > now), default=None)

    def warm(self, now: float) -> tuple[str, ...]:
        """Loaded adapters, least recently used first (what a heartbeat reports)."""
        return tuple(a for a, ready in self.ready_at.items() if ready <= now)

    def _evict(self, pinned: set[str]) -> None:
        excess = len(self.ready_at) - self.settings.cpu_capacity
        for adapter in [a for a in self.ready_at if a not in pinned][:max(0, excess)]:
            del self.ready_at[adapter]


class ZipfAdapters:
    """Adapter names ``{prefix}{k}``, k = 0..count-1, drawn with probability ~ 1 / (k+1)^s."""

    def __init__(self, spec: dict[str, Any], rng: random.Random) -> None:
        self.count = int(spec["count"])
        if self.count < 1:
            raise ValueError("adapters.count must be >= 1")
        self.s = float(spec.get("zipf_s", 1.1))
        self.prefix = str(spec.get("prefix", "lora-"))
        self.cumulative = list(itertools.accumulate(
            1.0 / (k + 1) ** self.s for k in range(self.count)))
        self.rng = rng

    def draw(self) -> str:
        k = self.rng.choices(range(self.count), cum_weights=self.cumulative)[0]
        return f"{self.prefix}{k}"
