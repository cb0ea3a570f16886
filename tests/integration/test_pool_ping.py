"""Pooled connections are pinged only when their socket shows something or they sat idle
long (service.store.db.check_on_checkout): no ping, no extra transaction, on the hot path or
after a short idle; a connection whose backend died while pooled is replaced before use."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from service.store.db import check_on_checkout
from service.store.settings import to_sqlalchemy_url


def counted_engine(url: str, idle_s: float) -> tuple[Any, list[int]]:
    engine = check_on_checkout(create_engine(to_sqlalchemy_url(url), pool_size=1), idle_s)
    pings: list[int] = []
    real = engine.dialect.do_ping

    def do_ping(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real(dbapi_connection)

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign]
    return engine, pings


def terminate(url: str, pid: int) -> None:
    other = create_engine(to_sqlalchemy_url(url))
    with other.begin() as admin:
        admin.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
    other.dispose()


def test_a_busy_or_briefly_idle_connection_is_not_pinged(database_url: str) -> None:
    engine, pings = counted_engine(database_url, idle_s=60)
    try:
        for _ in range(5):
            with engine.begin() as conn:
                assert conn.scalar(text("select 1")) == 1
            time.sleep(0.05)
        assert pings == []
    finally:
        engine.dispose()


def test_a_long_idle_connection_is_pinged_and_kept(database_url: str) -> None:
    engine, pings = counted_engine(database_url, idle_s=0.05)
    try:
        with engine.connect() as conn:
            pid = conn.scalar(text("select pg_backend_pid()"))
        time.sleep(0.1)
        with engine.connect() as conn:
            assert conn.scalar(text("select pg_backend_pid()")) == pid
        assert pings == [1]
    finally:
        engine.dispose()


def test_a_connection_whose_backend_died_while_pooled_is_replaced(database_url: str) -> None:
    """Within the idle limit: the dead backend's socket is readable, so it is pinged."""
    engine, pings = counted_engine(database_url, idle_s=60)
    try:
        with engine.connect() as conn:
            pid = conn.scalar(text("select pg_backend_pid()"))
        terminate(database_url, pid)
        time.sleep(0.2)
        with engine.connect() as conn:  # the ping finds it dead: a new one, no error
            assert conn.scalar(text("select pg_backend_pid()")) != pid
        assert len(pings) >= 1
    finally:
        engine.dispose()


def test_the_async_engine_sees_a_dead_backend_too(database_url: str) -> None:
    """The API's engine: its pooled connections are the asyncio adapter's."""
    engine = create_async_engine(to_sqlalchemy_url(database_url), pool_size=1)
    check_on_checkout(engine.sync_engine, idle_s=60)

    async def backend_pid() -> int:
        async with engine.connect() as conn:
            return int(await conn.scalar(text("select pg_backend_pid()")))

    async def run() -> tuple[int, int]:
        try:
            first = await backend_pid()
            terminate(database_url, first)
            await asyncio.sleep(0.2)
            return first, await backend_pid()
        finally:
            await engine.dispose()

    first, second = asyncio.run(run())
    assert second != first
