"""The chaos harness's own judgements (service/cli/chaos): how a stream ended, the token stall
around a fault, and which targets a row misses."""

from __future__ import annotations

from service.cli.chaos.faults import Injected, all_faults
from service.cli.chaos.load import HUNG, StreamRecord
from service.cli.chaos.report import Row, Targets, markdown
from service.cli.chaos.run import longest_gap, token_stall, ttft_p99


def _stream(started: float, events: list[float], ended: float, **kw: object) -> StreamRecord:
    s = StreamRecord("t", "default", started, ended=ended, status=200, events=events)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_how_a_stream_ended() -> None:
    assert _stream(0, [1], 2, finish_reason="stop", done=True).finished
    assert _stream(0, [1], 2).silent  # complete HTTP response, no end, no error
    assert not _stream(0, [1], 2, error="stream stream_interrupted").silent
    hung = _stream(0, [1], 2, error=HUNG)
    assert hung.hung and not hung.silent


def test_token_stall_spans_the_fault_for_streams_in_flight() -> None:
    fault = Injected("worker-1", hit=10.0, over=10.0)
    streams = [_stream(8, [9, 9.5, 16.5, 17], 17),  # on the victim: 9.5 -> 16.5
               _stream(9, [9.2, 10.1, 10.2], 10.3),  # elsewhere: 9.2 -> 10.1
               _stream(11, [11.5], 12),  # started after the fault
               _stream(1, [2], 3)]  # over before it
    assert token_stall(streams, fault) == 7.0
    assert token_stall(streams[2:], fault) is None


def _row(**kw: object) -> Row:
    base: dict[str, object] = dict(fault="redis down 3s", victim="redis", accepted=10, lost=0,
                                   duplicated=0, silent_truncations=0, client_errors={},
                                   recovery_s=1.0, token_stall_s=0.5, worker_fault=False,
                                   recovery_held=True)
    return Row(**{**base, **kw})  # type: ignore[arg-type]


def test_a_row_misses_each_target_it_is_held_to() -> None:
    t = Targets()
    assert _row().misses(t) == []
    assert len(_row(lost=1, duplicated=2, silent_truncations=1,
                    manual_restarts=["worker-1 (exit 1)"]).misses(t)) == 4
    assert _row(recovery_s=None).misses(t) and _row(recovery_s=10.5).misses(t)
    assert _row(recovery_s=30.0, recovery_held=False).misses(t) == []
    assert _row(worker_fault=True, token_stall_s=12.5).misses(t)
    table = markdown([_row(client_errors={"503 quota_unavailable": 3})], t, "x")
    assert "503 quota_unavailable x3" in table and "Missed: none." in table


def test_the_short_pass_has_every_fault_short() -> None:
    full, short = all_faults(short=False), all_faults(short=True)
    assert [f.target for f in full] == [f.target for f in short]
    assert max(f.duration_s for f in short) < 10 <= max(f.duration_s for f in full)
    assert {f.name for f in full} >= {"kill -9 worker", "kill -9 dispatcher", "kill -9 api",
                                      "redis down 10s", "redis down 60s", "postgres down 10s",
                                      "postgres down 60s", "freeze worker 15s",
                                      "freeze dispatcher 20s"}


def test_the_rolling_restart_is_judged_over_its_whole_span() -> None:
    roll = Injected("every process, one by one", hit=10.0, over=40.0)
    streams = [_stream(5, [6, 7], 8),  # before the roll: neither its gaps nor its TTFT count
               _stream(9, [9.5, 11, 14.5, 15], 15),  # a 3.5 s gap inside the roll
               _stream(20, [22, 22.1], 22.2),  # TTFT 2 s during the roll; no gap counts
               _stream(41, [41.2], 42)]  # after it
    assert longest_gap(streams, roll) == 3.5
    assert ttft_p99(streams, 0.0, roll.hit) == 1.0
    assert ttft_p99(streams, roll.hit, roll.over) == 2.0
    assert ttft_p99(streams[:1], roll.hit, roll.over) is None
    row = _row(fault="rolling restart", recovery_held=False, ttft_p99_before_s=0.29,
               ttft_p99_during_s=0.24)
    assert "rolling restart 0.29 -> 0.24" in markdown([row], Targets(), "x")
    assert [f.name for f in all_faults(short=True)][-1] == "rolling restart"
