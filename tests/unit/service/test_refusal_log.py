"""The recent-refusals list behind the dashboard's "recent 429s": newest first, bounded, and
fed by every admission refusal (metrics on or off)."""

from __future__ import annotations

import time

from service.store.telemetry import refusals
from service.store.telemetry.state import record_rejection, set_enabled


def test_recent_refusals_newest_first_within_the_window():
    start = time.time()
    refusals.note("t-old", "tokens_per_minute")
    record_rejection("t-a", "requests_per_minute")
    set_enabled(False)
    try:
        record_rejection("t-b", "slo_unattainable")
    finally:
        set_enabled(True)
    rows = [r for r in refusals.recent(since=start) if r["tenant_id"] in ("t-a", "t-b")]
    assert [(r["tenant_id"], r["reason"]) for r in rows] == [
        ("t-b", "slo_unattainable"), ("t-a", "requests_per_minute")]
    assert refusals.recent(since=time.time() + 60) == []


def test_recent_refusals_are_bounded():
    for i in range(2000):
        refusals.note(f"t{i}", "requests_per_minute")
    rows = refusals.recent(since=0)
    assert len(rows) == 500 and rows[0]["tenant_id"] == "t1999"
