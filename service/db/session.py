"""Engines and sessions. The API uses the async engine; the dispatcher and workers the sync one."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, sessionmaker

from service.settings import to_sqlalchemy_url


@functools.lru_cache(maxsize=8)
def sync_engine(url: str) -> Engine:
    return create_engine(to_sqlalchemy_url(url), pool_pre_ping=True, pool_size=5)


@functools.lru_cache(maxsize=8)
def async_engine(url: str) -> AsyncEngine:
    # One stack opens an API, a dispatcher and a worker pool per worker: keep each modest so a
    # default Postgres (100 connections) holds several stacks.
    return create_async_engine(to_sqlalchemy_url(url), pool_pre_ping=True, pool_size=10,
                               max_overflow=10)


def async_sessionmaker_for(url: str) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(async_engine(url), expire_on_commit=False)


@contextmanager
def sync_session(url: str) -> Iterator[Session]:
    factory = sessionmaker(sync_engine(url), expire_on_commit=False)
    with factory() as session:
        yield session
