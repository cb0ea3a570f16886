"""vLLM's per-step stats, forwarded to the engine wrapper (``worker.engine.vllm_engine``).

vLLM is imported inside the factory only, so importing this module is cheap and works where
vLLM is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_stats_sink(
    on_stats: Callable[[Any], None], on_preemptions: Callable[[int], None]
) -> Callable[[Any, int], Any]:
    """A per-engine StatLoggerFactory whose logger forwards each SchedulerStats, and the
    preemptions each IterationStats saw."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _SchedulerStatsSink(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                on_stats(scheduler_stats)
            # vLLM counts a preemption when the preempted request next reports output, so
            # this lags the preemption itself (a request aborted while preempted never counts).
            n = int(getattr(iteration_stats, "num_preempted_reqs", 0) or 0)
            if n:
                on_preemptions(n)

        def log_engine_initialized(self) -> None:
            pass

    return _SchedulerStatsSink
