"""A request's quota release that meets a Redis outage is retried until Redis is back: else
its concurrency slot stays taken until its expiry (the request timeout plus a minute), and a
tenant with a few slots is locked out (found by `fairway chaos`: a slot held after the
Redis outage's requests had all ended)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from service.quotas import reservation as admission
from service.quotas.reservation import Admission


class FlakyStore:
    """Fails ``failures`` settles as an unreachable Redis does, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.settled: list[dict[str, Any]] = []

    async def settle(self, **kwargs: Any) -> int:
        if self.failures:
            self.failures -= 1
            raise RedisConnectionError("Error 111 connecting. Connection refused.")
        self.settled.append(kwargs)
        return 0


def test_a_release_during_a_redis_outage_frees_the_slot_once_redis_is_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission, "RELEASE_RETRY_S", 0.01)
    ticket = uuid.uuid4()

    async def run() -> FlakyStore:
        store = FlakyStore(failures=3)
        ticket_holder = Admission(store, uuid.uuid4(), ticket, 10, "default", 1.0,  # type: ignore[arg-type]
                                  slot_ttl_s=5.0)
        await ticket_holder.release()  # fails at once: Redis is away; the response goes on
        assert store.settled == []
        for _ in range(200):
            if store.settled:
                break
            await asyncio.sleep(0.01)
        return store

    store = asyncio.run(run())
    assert len(store.settled) == 1 and store.settled[0]["free_slot"] == ticket


def test_a_refund_gives_every_reserved_token_back_and_frees_the_slot() -> None:
    ticket = uuid.uuid4()

    async def run() -> FlakyStore:
        store = FlakyStore(failures=0)
        holder = Admission(store, uuid.uuid4(), ticket, 10, "default", 1.0)  # type: ignore[arg-type]
        await holder.refund()
        await holder.release()  # a later release (the request's end) gives nothing back twice
        return store

    store = asyncio.run(run())
    assert store.settled == [{"tenant_id": store.settled[0]["tenant_id"], "ref": ticket,
                              "actual_tokens": 0, "free_slot": ticket}]


def test_a_request_whose_worker_settled_releases_nothing_more() -> None:
    async def run(settled: bool) -> FlakyStore:
        store = FlakyStore(failures=0)
        holder = Admission(store, uuid.uuid4(), uuid.uuid4(), 10, "default", 1.0)  # type: ignore[arg-type]
        if settled:
            holder.settled_by_worker()  # the job's final stream entry said so
        await holder.release()
        return store

    assert asyncio.run(run(settled=True)).settled == []
    assert len(asyncio.run(run(settled=False)).settled) == 1
