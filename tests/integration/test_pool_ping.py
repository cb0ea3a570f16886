"""Pooled connections are pinged only after sitting idle (service.store.db.ping_when_idle):
no ping, no extra transaction, on the hot path; a connection that died while idle is still
replaced before use."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import create_engine, text

from service.store.db import ping_when_idle
from service.store.settings import to_sqlalchemy_url


def counted_engine(url: str, idle_s: float) -> tuple[Any, list[int]]:
    engine = ping_when_idle(create_engine(to_sqlalchemy_url(url), pool_size=1), idle_s)
    pings: list[int] = []
    real = engine.dialect.do_ping

    def do_ping(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real(dbapi_connection)

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign]
    return engine, pings


def test_a_busy_connection_is_not_pinged(database_url: str) -> None:
    engine, pings = counted_engine(database_url, idle_s=60)
    try:
        for _ in range(5):
            with engine.begin() as conn:
                assert conn.scalar(text("select 1")) == 1
        assert pings == []
    finally:
        engine.dispose()


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(database_url: str) -> None:
    engine, pings = counted_engine(database_url, idle_s=0.05)
    try:
        with engine.connect() as conn:
            pid = conn.scalar(text("select pg_backend_pid()"))
        other = create_engine(to_sqlalchemy_url(database_url))
        with other.begin() as admin:
            admin.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
        other.dispose()
        time.sleep(0.2)
        with engine.connect() as conn:  # the ping finds it dead: a new one, no error
            assert conn.scalar(text("select pg_backend_pid()")) != pid
        assert len(pings) >= 1
    finally:
        engine.dispose()
