"""API-key lookups are remembered for `FAIRWAY_KEY_CACHE_SECONDS`: a busy
key costs no query per request, and a revocation or a suspension made elsewhere binds within
that window, never later."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest
from sqlalchemy import event, update

from service.store.db import async_sessionmaker_for, sync_session
from service.store.models.tenants import ApiKey, Tenant
from service.tenants.accounts import TenantSuspended, authenticate_key
from service.tenants.key_cache import KeyCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def count_key_lookups(url: str) -> list[str]:
    seen: list[str] = []

    def listener(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM api_keys" in statement:
            seen.append(statement)

    event.listen(async_sessionmaker_for(url).kw["bind"].sync_engine, "before_cursor_execute",
                 listener)
    return seen


def test_a_revoked_key_works_until_the_ttl_ends_then_never(settings, make_tenant):
    url = settings.database_url
    tenant_id, key = make_tenant()
    secret = settings.secret_key
    clock = Clock()
    cache = KeyCache(5.0, clock=clock)
    lookups = count_key_lookups(url)

    async def check() -> tuple[Tenant, uuid.UUID] | None:
        async with async_sessionmaker_for(url)() as session:
            return await authenticate_key(session, clear_key=key, secret=secret, cache=cache)

    first = asyncio.run(check())
    assert first is not None and first[0].id == tenant_id
    assert len(lookups) == 1
    again = asyncio.run(check())
    assert again is not None and again[0].id == tenant_id and again[1] == first[1]
    assert len(lookups) == 1  # the second request read no key row

    with sync_session(url) as session:  # revoked by another API process: no cache clear here
        session.execute(update(ApiKey).where(ApiKey.tenant_id == tenant_id)
                        .values(revoked_at=dt.datetime.now(dt.UTC)))
        session.commit()
    clock.now += 4.9
    assert asyncio.run(check()) is not None  # within the TTL: the remembered row
    clock.now += 0.2
    assert asyncio.run(check()) is None  # past it: refused
    assert len(lookups) == 2
    clock.now += 100
    assert asyncio.run(check()) is None


def test_a_suspension_binds_within_the_ttl_and_unknown_keys_are_not_kept(settings,
                                                                          make_tenant):
    url = settings.database_url
    tenant_id, key = make_tenant()
    clock = Clock()
    cache = KeyCache(2.0, clock=clock)

    async def check(k: str) -> tuple[Tenant, uuid.UUID] | None:
        async with async_sessionmaker_for(url)() as session:
            return await authenticate_key(session, clear_key=k, secret=settings.secret_key,
                                          cache=cache)

    assert asyncio.run(check(key)) is not None
    assert asyncio.run(check("fw-not-a-key")) is None
    assert len(cache) == 1
    with sync_session(url) as session:
        session.execute(update(Tenant).where(Tenant.id == tenant_id)
                        .values(suspended_at=dt.datetime.now(dt.UTC)))
        session.commit()
    clock.now += 2.0
    with pytest.raises(TenantSuspended):
        asyncio.run(check(key))


def test_ttl_zero_reads_every_time(settings, make_tenant):
    url = settings.database_url
    _, key = make_tenant()
    cache = KeyCache(0.0)
    lookups = count_key_lookups(url)

    async def check() -> tuple[Tenant, uuid.UUID] | None:
        async with async_sessionmaker_for(url)() as session:
            return await authenticate_key(session, clear_key=key, secret=settings.secret_key,
                                          cache=cache)

    assert asyncio.run(check()) is not None and asyncio.run(check()) is not None
    assert len(lookups) == 2 and len(cache) == 0
