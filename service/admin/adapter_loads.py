"""Adapters' load times and where they are warm, from the live workers' beats (worker.beat):
each beat lists the adapters its engine holds loaded (``adapters``, by ft: name) and its
recent load times per adapter id (``adapter_load_times``: the last few loads' seconds and when
the last ended). Pure: the caller reads the beats. A beat is another process's writing, so a
malformed part is skipped, never trusted."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from service.store.heartbeats import adapter_load_times


@dataclass(slots=True)
class _Loads:
    seconds: list[float] = field(default_factory=list)  # every live worker's samples
    last_s: float | None = None
    last_at: float = 0.0


@dataclass(frozen=True, slots=True)
class AdapterLoads:
    """What the live workers say about each adapter: its load times, who holds it warm."""

    times: dict[str, _Loads]  # adapter id -> its loads
    warm: dict[str, list[str]]  # ft: name -> the workers holding it loaded now, sorted

    @staticmethod
    def of(beats: Iterable[dict[str, Any]]) -> AdapterLoads:
        times: dict[str, _Loads] = {}
        warm: dict[str, list[str]] = {}
        for beat in beats:
            worker = beat.get("worker_id")
            if not isinstance(worker, str):
                continue
            for model in _strings(beat.get("adapters")):
                warm.setdefault(model, []).append(worker)
            for adapter, (seconds, at) in adapter_load_times(
                    beat.get("adapter_load_times")).items():
                _add(times.setdefault(adapter, _Loads()), seconds, at)
        return AdapterLoads(times, {m: sorted(set(w)) for m, w in warm.items()})

    def view(self, adapter_id: str, model: str) -> dict[str, Any]:
        """The admin view's load fields of one adapter (its id and ft: name)."""
        loads = self.times.get(adapter_id)
        samples = loads.seconds if loads else []
        return {"last_load_s": loads.last_s if loads else None,
                "median_load_s": round(statistics.median(samples), 3) if samples else None,
                "load_samples": len(samples), "warm_on": self.warm.get(model, [])}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _add(loads: _Loads, seconds: list[float], at: float) -> None:
    loads.seconds.extend(seconds)
    if at >= loads.last_at:  # the worker whose last load ended latest says "last"
        loads.last_s, loads.last_at = seconds[-1], at
