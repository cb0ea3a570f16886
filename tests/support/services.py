"""Real Postgres and Redis for tests: a throwaway database per session, a Redis db number."""

from __future__ import annotations

import os
import uuid

import psycopg

from service.db.migrate import upgrade

PG_ADMIN_URL = os.environ.get("FAIRWAY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE_URL = os.environ.get("FAIRWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def create_database(prefix: str = "fairway_test") -> str:
    """Create a fresh database migrated to head; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    return url


def create_empty_database(prefix: str = "fairway_mig") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_url(db: int) -> str:
    return f"{REDIS_BASE_URL}/{db}"
