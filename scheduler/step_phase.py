"""Step phase lock: stagger a pool's engine steps so a realtime arrival always finds a worker
whose step ends soon.

Under a batch flood a realtime job waits out the step in flight on the worker it lands on
(``scheduler.policies.rt_start`` picks the worker whose step ends first). Left alone, the
workers' steps drift in and out of phase, and at the tail they all end late together: on the
H200 profile the smallest residual among 4 workers was 19 ms at p99 with ~25 ms steps, where
evenly spread steps would bound it by a quarter step. So each engine keeps its step ends on a
grid of its own: period ``P`` (common to the pool), offset ``P * spread(slot)``. Under the
realtime guard the batch prefill chunk is the lever: it is sized so the step ends on the next
grid point (``chunk_for_grid``); the decode work of the step is what it is.

Slots come from the order workers join a pool; ``spread`` (base-2 van der Corput) keeps the
first N offsets within 2x of even for any N, so a worker joining or leaving never requires
the others to move.

The simulator (``scheduler.sim.engine_model``) and the vLLM guard (``worker.engine.vllm_guard``) run
the same functions. docs/scheduler.md, "Step phase lock", has the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def spread(slot: int) -> float:
    """Fraction of a period for ``slot``: 0, 1/2, 1/4, 3/4, 1/8, 5/8, ... (bit reversal)."""
    if slot < 0:
        raise ValueError("slot must be >= 0")
    frac, scale = 0.0, 0.5
    while slot:
        if slot & 1:
            frac += scale
        slot >>= 1
        scale /= 2
    return frac


@dataclass(frozen=True, slots=True)
class PhaseGrid:
    period_s: float
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        if self.period_s <= 0:
            raise ValueError("period_s must be > 0")

    @classmethod
    def for_slot(cls, period_s: float, slot: int) -> PhaseGrid:
        return cls(period_s, period_s * spread(slot))

    def next_point(self, t: float) -> float:
        """The first grid point at or after ``t``."""
        m = math.ceil((t - self.offset_s) / self.period_s - 1e-9)
        return self.offset_s + m * self.period_s


def chunk_for_grid(
    grid: PhaseGrid, now: float, fixed_s: float, per_token_s: float, max_tokens: int
) -> int:
    """Batch prefill tokens for a step that starts at ``now`` and whose other work (decodes,
    step overhead) takes ``fixed_s``, so that it ends on the grid's next point. When that
    point needs more than ``max_tokens``, the step takes ``max_tokens`` and ends early; the
    next step locks again."""
    earliest = now + fixed_s
    tokens = (grid.next_point(earliest) - earliest) / max(per_token_s, 1e-12)
    return max(0, min(max_tokens, int(tokens)))
