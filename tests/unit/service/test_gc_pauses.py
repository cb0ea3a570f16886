"""Start-up heap freezing and GC pause timing (service.store.telemetry.gc_pauses)."""

from __future__ import annotations

import gc

from service.store.telemetry.gc_pauses import freeze_startup_heap
from service.store.telemetry.metrics import REGISTRY


def _pauses(generation: str) -> float:
    return REGISTRY.get_sample_value("fairway_gc_pause_seconds_count",
                                     {"generation": generation}) or 0.0


def test_the_heap_alive_at_start_up_is_frozen_and_collections_are_timed() -> None:
    before = _pauses("2")
    try:
        frozen = freeze_startup_heap("test")
        # This process's modules, at least. Threads left by earlier tests may free frozen
        # objects meanwhile (CI saw 66 of 1.1 million go): the count can only fall.
        assert frozen > 1000 and frozen * 0.99 <= gc.get_freeze_count() <= frozen
        gc.collect()  # a full pass: walks only what came after, and is timed
        assert _pauses("2") >= before + 1
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
