"""The SSE relay drops text a retried attempt regenerates, and stops at the final event."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from service.api.relay import Interrupted, NewText, RelayPace, TimedOut, follow_job
from service.store.job_stream import Failure, Final


class FakeStreamRedis:
    """Just enough of redis.asyncio's xread for the relay: serves a fixed list of entries."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = [(f"{i + 1}-0".encode(), {k.encode(): str(v).encode()
                                                 for k, v in e.items()})
                        for i, e in enumerate(entries)]

    async def xread(self, streams: dict[str, str], count: int, block: int) -> Any:
        last = next(iter(streams.values()))
        rest = [e for e in self.entries if e[0] > (last.encode() if isinstance(last, str)
                                                   else last)]
        return [(b"k", rest[:count])] if rest else []


def _kind(ev: object) -> tuple[str, str]:
    if isinstance(ev, NewText):
        return "delta", ev.text
    if isinstance(ev, Final):
        return "final", ""
    if isinstance(ev, Failure):
        return "error", ev.message
    if isinstance(ev, Interrupted):
        return "interrupted", ev.reason
    assert isinstance(ev, TimedOut)
    return "timeout", ""


def _collect(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    async def run() -> list[tuple[str, str]]:
        redis = FakeStreamRedis(entries)
        out = []
        async for ev in follow_job(redis, uuid.uuid4(), timeout_s=0.05, pace=RelayPace(block_ms=1)):  # type: ignore[arg-type]
            out.append(_kind(ev))
        return out

    return asyncio.run(run())


def test_deltas_then_final():
    out = _collect([{"type": "delta", "attempt": 1, "text": "Hel", "offset": 0},
                    {"type": "delta", "attempt": 1, "text": "lo", "offset": 3},
                    {"type": "final", "attempt": 1, "finish_reason": "stop"},
                    {"type": "delta", "attempt": 1, "text": "never", "offset": 5}])
    assert out == [("delta", "Hel"), ("delta", "lo"), ("final", "")]


def test_retried_attempt_does_not_repeat_text():
    out = _collect([{"type": "delta", "attempt": 1, "text": "The cap", "offset": 0},
                    {"type": "delta", "attempt": 2, "text": "The", "offset": 0},
                    {"type": "delta", "attempt": 2, "text": " capital", "offset": 3},
                    {"type": "delta", "attempt": 2, "text": " is", "offset": 11},
                    {"type": "final", "attempt": 2}])
    assert "".join(t for k, t in out if k == "delta") == "The capital is"


def test_times_out_when_nothing_arrives():
    assert _collect([]) == [("timeout", "")]


def test_an_error_ends_the_relay_and_junk_entries_are_skipped():
    # Junk: an unknown type, an attempt that is no number, a delta without its offset.
    out = _collect([{"type": "delta", "attempt": 1, "text": "a", "offset": 0},
                    {"type": "mystery", "attempt": 1},
                    {"type": "delta", "attempt": 1, "text": "no offset"},
                    {"type": "delta", "attempt": "x", "text": "b", "offset": 1},
                    {"type": "error", "attempt": 1, "status": 429, "message": "busy"},
                    {"type": "delta", "attempt": 1, "text": "never", "offset": 1}])
    assert out == [("delta", "a"), ("error", "busy")]


def test_a_stale_attempt_is_ignored_once_a_newer_one_streams():
    out = _collect([{"type": "delta", "attempt": 1, "text": "The ", "offset": 0},
                    {"type": "delta", "attempt": 2, "text": "The cap", "offset": 0},
                    {"type": "delta", "attempt": 1, "text": "dog", "offset": 4},
                    {"type": "delta", "attempt": 2, "text": "ital", "offset": 7},
                    {"type": "final", "attempt": 2}])
    assert "".join(t for k, t in out if k == "delta") == "The capital"


def test_a_hole_in_one_attempt_interrupts_the_relay():
    out = _collect([{"type": "delta", "attempt": 1, "text": "abc", "offset": 0},
                    {"type": "delta", "attempt": 1, "text": "xyz", "offset": 10},
                    {"type": "final", "attempt": 1}])
    assert out[-1][0] == "interrupted"


def _relay(redis: Any, settled: Any, timeout_s: float = 1.0) -> list[tuple[str, str]]:
    async def run() -> list[tuple[str, str]]:
        out = []
        async for ev in follow_job(redis, uuid.uuid4(), timeout_s=timeout_s, settled=settled,
                                   pace=RelayPace(block_ms=1, settle_check_s=0.02)):
            out.append(_kind(ev))
        return out

    return asyncio.run(run())


def test_a_final_row_ends_a_stream_whose_end_never_comes():
    """The worker wrote its result and died before its stream's end reached Redis (found by
    `fairway chaos`: streams hung until the request timeout). The row is the truth."""
    reads = []

    async def settled() -> Any:
        reads.append(1)
        return "Hello", Final(2, "stop", 3, 2)

    redis = FakeStreamRedis([{"type": "delta", "attempt": 1, "text": "Hel", "offset": 0}])
    assert _relay(redis, settled) == [("delta", "Hel"), ("delta", "lo"), ("final", "")]
    assert len(reads) == 1


def test_an_active_row_leaves_the_stream_waiting():
    async def settled() -> Any:
        return None

    assert _relay(FakeStreamRedis([]), settled, timeout_s=0.1) == [("timeout", "")]


def test_a_failed_row_ends_the_stream_with_its_error():
    async def settled() -> Any:
        return "", Failure(1, 500, "engine_error", "The engine failed on this request.")

    redis = FakeStreamRedis([{"type": "delta", "attempt": 1, "text": "Hel", "offset": 0}])
    assert _relay(redis, settled) == [("delta", "Hel"),
                                      ("error", "The engine failed on this request.")]


class DownRedis:
    async def xread(self, *_: Any, **__: Any) -> Any:
        raise RedisConnectionError("Connection refused")


def test_a_final_row_ends_the_stream_while_redis_is_away():
    async def settled() -> Any:
        return "Hello", Final(1, "length", 3, 2)

    assert _relay(DownRedis(), settled) == [("delta", "Hello"), ("final", "")]


def test_a_final_whose_worker_settled_the_quota_is_told_before_it_is_yielded():
    async def run(final: dict[str, Any]) -> list[str]:
        told: list[str] = []
        redis = FakeStreamRedis([{"type": "delta", "attempt": 1, "text": "hi", "offset": 0}, final])
        async for ev in follow_job(redis, uuid.uuid4(), timeout_s=0.05,  # type: ignore[arg-type]
                                   on_quota_settled=lambda: told.append("settled"),
                                   pace=RelayPace(block_ms=1)):
            told.append(_kind(ev)[0])
        return told

    settled = {"type": "final", "attempt": 1, "finish_reason": "stop", "settled": 1}
    assert asyncio.run(run(settled)) == ["delta", "settled", "final"]
    assert asyncio.run(run({"type": "final", "attempt": 1})) == ["delta", "final"]


def test_a_silent_stream_reads_its_row_less_often_the_longer_it_is_silent() -> None:
    """A job queued behind a flood says nothing until it starts: its row is read after the
    settle check, then at doubling gaps up to ROW_CHECK_MAX_GAP of it, not every check."""
    reads: list[float] = []

    async def settled() -> Any:
        reads.append(time.monotonic())
        return None

    _relay(FakeStreamRedis([]), settled, timeout_s=0.5)
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    # 0.02 s, then gaps of 0.04, 0.08, 0.08, ...: 7 or so in 0.5 s, where a read every
    # 0.02 s would make about 25.
    assert 2 <= len(reads) <= 10, reads
    assert gaps[0] >= 0.035  # the second read waited twice the first's quiet
