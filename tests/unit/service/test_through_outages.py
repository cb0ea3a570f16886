"""``through_outages``: the first try runs without a retry loop (two per realtime
job in a worker), and an outage after it is still waited out, backing off, until the budget."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from service.store.outages import REDIS, Dependencies, through_outages


def _calls(results: list[BaseException | str]
           ) -> tuple[list[float], Callable[[], Awaitable[str]]]:
    at: list[float] = []

    async def call() -> str:
        at.append(time.monotonic())
        outcome = results.pop(0) if len(results) > 1 else results[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return at, call


def test_a_call_that_works_runs_once() -> None:
    at, call = _calls(["ok"])
    deps = Dependencies(logging.getLogger("test"))
    assert asyncio.run(through_outages(call, deps, give_up_after_s=5)) == "ok"
    assert len(at) == 1 and deps.all_up


def test_an_outage_is_waited_out_and_noted() -> None:
    at, call = _calls([RedisConnectionError("down"), RedisConnectionError("down"), "ok"])
    deps = Dependencies(logging.getLogger("test"))
    assert asyncio.run(through_outages(call, deps, give_up_after_s=5)) == "ok"
    assert len(at) == 3
    assert at[2] - at[1] >= 0.15  # the loop backs off after its own first (immediate) try
    assert not deps.states[REDIS].up  # noted down; the caller says when it is up again


def test_other_errors_raise_at_once() -> None:
    at, call = _calls([ValueError("bad"), "ok"])
    with pytest.raises(ValueError):
        asyncio.run(through_outages(call, Dependencies(logging.getLogger("test")),
                                    give_up_after_s=5))
    assert len(at) == 1


def test_an_outage_longer_than_the_budget_raises_it() -> None:
    at, call = _calls([RedisConnectionError("down")])
    started = time.monotonic()
    with pytest.raises(RedisConnectionError):
        asyncio.run(through_outages(call, Dependencies(logging.getLogger("test")),
                                    give_up_after_s=0.6))
    assert 0.6 <= time.monotonic() - started < 3.0 and len(at) >= 3
