"""Shared helpers for the scheduler benches (run from the repository root)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python bench/sched_*.py` without installing
    sys.path.insert(0, str(ROOT))

SCENARIOS = ROOT / "bench" / "scenarios"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")
