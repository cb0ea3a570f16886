"""Real Postgres and Redis for tests: a throwaway database per session, a Redis db number."""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

from service.store.migrate import upgrade

PG_ADMIN_URL = os.environ.get("FAIRWAY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE_URL = os.environ.get("FAIRWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379")


# The plan tests' tenants are on by default: the standard plan's quotas, but a TTFT target so
# far away that the tiny simulated pools tests run on never shed their requests. Admission by
# TTFT is tested on its own, with real plans (tests/integration/test_slo_admission.py).
PATIENT_PLAN = "test-patient"


def database_url(name: str, admin_url: str | None = None) -> str:
    """The admin URL with its database replaced: keeps a query string (pgserver's socket URLs,
    `postgresql://postgres:@/postgres?host=/tmp/...`, put the host there)."""
    parts = urlsplit(admin_url or PG_ADMIN_URL)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(prefix: str = "fairway_test") -> str:
    """Create a fresh database migrated to head, with the patient plan; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tiers (name, weight, allowed_service_tiers, ttft_slo_ms, "
                     "tpot_slo_ms, quotas) SELECT %s, weight, allowed_service_tiers, 3600000, "
                     "60000, quotas FROM tiers WHERE name = 'standard'", (PATIENT_PLAN,))
    return url


def create_empty_database(prefix: str = "fairway_mig") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_url(db: int) -> str:
    return f"{REDIS_BASE_URL}/{db}"


_LEASE_KEY = "fairway:test-redis-db:{}"


def claim_redis_db(ttl_s: int = 4 * 3600) -> str:
    """A Redis db number no other stack (in this run or a concurrent one) is using, flushed.

    Stacks share Celery queue names (worker "sim-1"), so two stacks on one db would take
    each other's tasks. Leases live in db 0; release_redis_db gives one back.
    """
    from redis import Redis

    admin = Redis.from_url(redis_url(0))
    for db in range(1, 16):
        if admin.set(_LEASE_KEY.format(db), os.getpid(), nx=True, ex=ttl_s):
            url = redis_url(db)
            Redis.from_url(url).flushdb()
            return url
    raise RuntimeError("no free Redis db for a test stack (all 15 leased)")


def release_redis_db(url: str) -> None:
    from redis import Redis

    db = int(url.rsplit("/", 1)[1])
    Redis.from_url(url).flushdb()
    Redis.from_url(redis_url(0)).delete(_LEASE_KEY.format(db))
