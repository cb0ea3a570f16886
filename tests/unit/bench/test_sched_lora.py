"""bench/sched_lora.py: the aware / blind table on a tiny run, and its ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))  # the scheduler benches import sched_common as run from bench/

import sched_lora  # noqa: E402


def test_a_tiny_run_prints_the_three_placements_and_their_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sched_lora.main(["--adapters", "20", "--duration", "4", "--drain", "3",
                            "--rate", "30", "--workers", "2", "--seeds", "1,2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("20 ")]
    assert [row[1] for row in rows[:3]] == ["hold", "aware", "blind"]
    assert len(rows) == 6  # the three placements and three ratios
    aware, blind = (float(row[5]) for row in rows[1:3])  # loads per minute
    assert 0 < aware < blind


def test_figures_are_medians_over_the_seeds() -> None:
    runs = [{"adapters": 10, "placement": "hold", "tok_s": t, "ttft_p50": 0.1,
             "ttft_p99": p99, "loads_min": 1.0, "slo": 0.5, "refused": 0, "unfinished": 0}
            for t, p99 in ((100.0, 9.0), (300.0, 1.0), (200.0, 2.0))]
    row = sched_lora.median_of(runs)
    assert (row["tok_s"], row["ttft_p99"]) == (200.0, 2.0)


def test_ratios_are_over_blind_and_hold_over_aware() -> None:
    row = {"tok_s": 100.0, "ttft_p50": 0.1, "ttft_p99": 1.0, "loads_min": 10.0, "slo": 0.5}
    rows = [{**row, "adapters": 10, "placement": "hold", "ttft_p99": 0.5},
            {**row, "adapters": 10, "placement": "aware"},
            {**row, "adapters": 10, "placement": "blind", "tok_s": 50.0, "loads_min": 40.0}]
    lines = [line.split() for line in sched_lora.ratios(rows)[1:]]
    assert lines[0] == ["10", "hold", "/", "blind:", "2.00", "1.00", "0.50", "0.25", "1.00"]
    assert lines[1] == ["10", "aware", "/", "blind:", "2.00", "1.00", "1.00", "0.25", "1.00"]
    assert lines[2] == ["10", "hold", "/", "aware:", "1.00", "1.00", "0.50", "1.00", "1.00"]
