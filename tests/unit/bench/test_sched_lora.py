"""bench/sched_lora.py: the aware / blind table on a tiny run, and its ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))  # the scheduler benches import sched_common as run from bench/

import sched_lora  # noqa: E402


def test_a_tiny_run_prints_both_placements_and_their_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sched_lora.main(["--adapters", "20", "--duration", "4", "--drain", "3",
                            "--rate", "30", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("20 ")]
    assert [row[1] for row in rows[:2]] == ["aware", "blind"]
    assert len(rows) == 3  # the two placements and their ratios
    aware, blind = (float(row[5]) for row in rows[:2])  # loads per minute
    assert 0 < aware < blind


def test_ratios_are_aware_over_blind() -> None:
    row = {"tok_s": 100.0, "ttft_p50": 0.1, "ttft_p99": 1.0, "loads_min": 10.0, "slo": 0.5}
    rows = [{**row, "adapters": 10, "aware": True},
            {**row, "adapters": 10, "aware": False, "tok_s": 50.0, "loads_min": 40.0}]
    line = sched_lora.ratios(rows)[1].split()
    assert line == ["10", "2.00", "1.00", "1.00", "0.25", "1.00"]
