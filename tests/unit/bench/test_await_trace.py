"""bench/await_trace.py: a coroutine stepped by hand reports each real yield to the event loop
(where, how long), none for awaits that complete at once, and still returns its value or
raises its error."""

from __future__ import annotations

import asyncio

import pytest

from bench.await_trace import Trace, traced


async def _at_once() -> int:
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(1)
    return await done  # completes without yielding


async def _waits() -> int:
    await asyncio.sleep(0.02)
    await asyncio.sleep(0)
    return 2


async def _fails() -> None:
    await asyncio.sleep(0)
    raise ValueError("refused")


def test_only_real_suspensions_are_recorded_with_their_await_chain() -> None:
    async def run() -> None:
        quick, slow = Trace(), Trace()
        assert await traced(_at_once(), quick) == 1
        assert quick.suspensions == []
        assert await traced(_waits(), slow) == 2
        assert len(slow.suspensions) == 2
        first, second = slow.suspensions
        assert first.waited_s >= 0.015 and "_waits" in slow.site()[0]
        assert first.chain[0].startswith("tests/unit/bench/test_await_trace.py:")
        assert second.waited_s < 0.015

    asyncio.run(run())


def test_an_error_after_a_suspension_reaches_the_caller() -> None:
    async def run() -> None:
        trace = Trace()
        with pytest.raises(ValueError, match="refused"):
            await traced(_fails(), trace)
        assert len(trace.suspensions) == 1

    asyncio.run(run())
