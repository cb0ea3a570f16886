"""Keep the garbage collector's full passes short in long-lived processes, and time them.

A full (generation 2) collection walks every tracked object. After start-up the API holds
~165-175k of them (FastAPI, SQLAlchemy, pydantic, OpenTelemetry), the dispatcher ~150k, a sim
worker ~120k and a vLLM worker ~725k (torch, vLLM, the tokenizer). On two cores one such
pass took 100-325 ms in the smaller ones: the whole process (GIL) stops,
so a refusal at the door, a dispatch decision or a token relay waits behind it. Under
overload that pause was the p99 of the door's refusal latency (bench/overload.py).

``freeze_startup_heap`` moves everything alive at the end of start-up (modules, classes,
routes, compiled schemas) into the permanent generation (``gc.freeze``), which collections
never walk: later full passes only see objects made since. Objects frozen are never
collected, so it runs once, after start-up, when what is alive is meant to stay.

``fairway_gc_pause_seconds`` (by generation) shows what pauses remain.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Histogram

from service.store.telemetry.metrics import REGISTRY

log = logging.getLogger("fairway.gc")

GC_PAUSE = Histogram(
    "fairway_gc_pause_seconds",
    "Time the process stood still in one garbage collection, by generation.",
    ("generation",),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=REGISTRY)
_started: list[float] = []


def _time_pause(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        GC_PAUSE.labels(str(info.get("generation", "?"))).observe(
            time.perf_counter() - _started.pop())


def time_gc_pauses() -> None:
    """Observe every collection's pause in ``fairway_gc_pause_seconds``; idempotent."""
    if _time_pause not in gc.callbacks:
        gc.callbacks.append(_time_pause)


def freeze_startup_heap(role: str) -> int:
    """Collect once, then freeze what survives so no later collection walks it. Returns the
    number of objects frozen."""
    time_gc_pauses()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen: %d objects", frozen, extra={"role": role})
    return frozen
