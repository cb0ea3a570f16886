"""The replay report's arithmetic (service/cli/replay/report.py): percentiles, TPOT, SLO
attainment and goodput, batch throughput, on outcomes small enough to check by hand."""

from __future__ import annotations

import math

import pytest

from service.cli.replay.load import BatchOutcome, Outcomes, RealtimeOutcome
from service.cli.replay.plan import BatchFile, Entry, Request
from service.cli.replay.report import (
    batch_rows,
    markdown,
    percentile,
    realtime_rows,
    tpot,
)

SLO = {"premium": 0.5, "standard": 1.0}
PREMIUM = Entry("p", "premium", "priority")
STANDARD = Entry("s", "standard")


def rt(entry: Entry, status: str, ttft: float | None, e2e: float | None = None,
       tokens: int = 0) -> RealtimeOutcome:
    return RealtimeOutcome(Request(0, 0.0, entry, 10, tokens), status, ttft, e2e, tokens)


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 0) == 1 and percentile([4, 1, 3, 2], 100) == 4
    assert percentile([0, 10], 99) == pytest.approx(9.9)
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))


def test_tpot_is_time_after_the_first_token_per_later_token() -> None:
    assert tpot(rt(PREMIUM, "ok", 0.2, 1.2, 11)) == pytest.approx(0.1)
    assert tpot(rt(PREMIUM, "ok", 0.2, 0.2, 1)) is None
    assert tpot(rt(PREMIUM, "refused", None)) is None


def test_attainment_counts_every_sent_request_and_goodput_is_per_second() -> None:
    outs = [rt(PREMIUM, "ok", 0.1, 1.1, 11), rt(PREMIUM, "ok", 0.4, 2.4, 11),
            rt(PREMIUM, "ok", 0.9, 1.9, 11), rt(PREMIUM, "refused", None),
            rt(STANDARD, "ok", 0.9, 1.9, 11), rt(STANDARD, "unfinished", None)]
    rows = {r.group: r for r in realtime_rows(Outcomes("x", outs, [], 10.0, 12.0), SLO)}
    p = rows["p (premium, priority)"]
    assert (p.sent, p.ok, p.refused, p.slo_s) == (4, 3, 1, 0.5)
    assert p.ttft_p50 == 0.4  # of the three that finished
    # TPOTs 0.1, 0.2, 0.1 s: p99 sits 0.98 of the way from the 2nd (0.1) to the 3rd (0.2)
    assert p.tpot_p50 == pytest.approx(0.1) and p.tpot_p99 == pytest.approx(0.198)
    assert p.attainment == 0.5  # 0.1 and 0.4 within 0.5 s, of 4 sent
    assert p.goodput == pytest.approx(0.2)  # 2 requests over 10 s
    s = rows["s (standard, default)"]
    assert (s.attainment, s.goodput) == (0.5, pytest.approx(0.1))  # 0.9 <= 1.0 s
    whole = rows["all realtime"]
    assert whole.sent == 6 and whole.attainment == pytest.approx(3 / 6)
    assert whole.goodput == pytest.approx(0.3)


def test_a_request_without_its_tier_target_is_an_error() -> None:
    with pytest.raises(ValueError, match="no TTFT target"):
        realtime_rows(Outcomes("x", [rt(Entry("t", "gold"), "ok", 0.1)], [], 1.0, 1.0), SLO)
    own = Entry("t", "gold", slo_ttft_s=0.05)
    [row] = realtime_rows(Outcomes("x", [rt(own, "ok", 0.1)], [], 1.0, 1.0), SLO)
    assert row.attainment == 0.0


def test_batch_throughput_and_completion() -> None:
    bulk = Entry("b", batch=True)
    lines = tuple(Request(i, 0.0, bulk, 10, 10) for i in range(3))
    done = BatchOutcome(BatchFile("b", 10.0, lines), "completed", 3, 30, 25.0)
    late = BatchOutcome(BatchFile("b", 20.0, lines[:2]), "cancelled", 1, 10, None)
    [row] = batch_rows(Outcomes("x", [], [done, late], 30.0, 50.0))
    assert (row.files, row.files_done, row.lines, row.lines_done) == (2, 1, 5, 4)
    # 40 tokens from the first submission (10 s) to the end of the run (50 s): one file
    # was still open.
    assert row.tokens_per_s == pytest.approx(1.0)
    assert row.completion_p50_s == 15.0
    [finished] = batch_rows(Outcomes("x", [], [done], 30.0, 50.0))
    assert finished.tokens_per_s == pytest.approx(2.0)  # 30 tokens over 10..25 s


def test_markdown_puts_targets_side_by_side() -> None:
    a = Outcomes("fairway", [rt(PREMIUM, "ok", 0.1, 1.1, 11)], [], 10.0, 10.0)
    b = Outcomes("vllm-fcfs", [rt(PREMIUM, "ok", 0.7, 1.7, 11)], [], 10.0, 10.0)
    text = markdown([("fairway", a), ("vllm-fcfs", b)], SLO)
    rows = [line for line in text.splitlines() if line.startswith("| p (premium")]
    assert rows[0].split(" | ")[1] == "fairway" and "100.0%" in rows[0]
    assert rows[1].split(" | ")[1] == "vllm-fcfs" and "0.0%" in rows[1]
