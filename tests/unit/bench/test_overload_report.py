"""bench/overload_report.py: the refusals that would have met, per plan and as a floor."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))  # the bench imports harness as run from bench/

from overload_report import would_have_met  # noqa: E402

TARGETS = {"premium": 0.5, "standard": 1.0}


@dataclass
class Out:
    plan: str
    status: int
    ttft_s: float | None
    job_hex: str | None = None


def test_more_met_without_the_door_counts_per_plan() -> None:
    # Without the door: premium 3 met, standard 1 met (one late). With it: premium 1 met
    # (two refused), standard 2 met.
    off = [Out("premium", 200, 0.2), Out("premium", 200, 0.4), Out("premium", 200, 0.3),
           Out("standard", 200, 0.9), Out("standard", 200, 1.5)]
    on = [Out("premium", 200, 0.2), Out("premium", 429, None), Out("premium", 429, None),
          Out("standard", 200, 0.5), Out("standard", 200, 0.8)]
    # Standard's surplus with the door is credited to nobody: the count is a floor.
    assert would_have_met(on, TARGETS, off) == (2, 4)


def test_nothing_would_have_met_when_the_door_loses_none() -> None:
    off = [Out("premium", 200, 0.7), Out("standard", 200, 2.0)]
    on = [Out("premium", 429, None), Out("standard", 429, None)]
    assert would_have_met(on, TARGETS, off) == (0, 0)
