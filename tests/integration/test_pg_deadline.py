"""The API's Postgres connections end a round trip at their deadline, closed and replaced,
unless the statement is one allowed to wait (service/store/pg_deadline.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from service.store.db import async_engine
from service.store.outages import is_outage
from service.store.pg_deadline import waiting_for_locks


def test_a_round_trip_past_the_deadline_is_an_outage_and_the_pool_recovers(database_url: str):
    engine = async_engine(database_url, 0.5)

    async def run() -> None:
        async with engine.connect() as conn:
            started = time.monotonic()
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(text("SELECT pg_sleep(2)"))
            assert time.monotonic() - started < 1.5
            assert is_outage(caught.value) and caught.value.connection_invalidated
        async with engine.connect() as conn:  # a fresh connection, at once
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
        async with engine.connect() as conn:
            with waiting_for_locks(5):
                assert (await conn.execute(text("SELECT pg_sleep(1), 2"))).one()[1] == 2
        await engine.dispose()

    asyncio.run(run())


def test_without_a_deadline_nothing_changes(database_url: str):
    engine = async_engine(database_url)

    async def run() -> None:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_sleep(0.6), 1"))).one()[1] == 1
        await engine.dispose()

    asyncio.run(run())
