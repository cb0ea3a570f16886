"""Shared helpers for the scheduler benches (run from the repository root)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python bench/sched_*.py` without installing
    sys.path.insert(0, str(ROOT))

SCENARIOS = ROOT / "bench" / "scenarios"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


def largest_passing_scale(ok: Callable[[float], bool], *, bisect: int, floor: float,
                          ceiling: float) -> float:
    """The largest rate scale ``ok`` passes, by doubling or halving from 1 and then ``bisect``
    log-bisection steps; 0 when not even ``floor`` passes (``ok`` is assumed monotone)."""
    lo, hi = 1.0, 2.0
    if not ok(lo):
        while not ok(lo):
            lo, hi = lo / 2, lo
            if lo < floor:
                return 0.0
    else:
        while ok(hi) and hi < ceiling:
            lo, hi = hi, hi * 2
    for _ in range(bisect):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
