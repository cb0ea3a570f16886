"""The database floor: the declarative base (with a naming convention, so Alembic names
constraints predictably), and engines and sessions. The API uses the async engine; the
dispatcher and the workers the sync one."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import DateTime, Engine, MetaData, create_engine, func
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from service.store.settings import to_sqlalchemy_url

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def utcnow_column() -> Mapped[dt.datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


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
