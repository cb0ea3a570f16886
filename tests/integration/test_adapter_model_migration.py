"""Migration 0019 (``jobs.adapter_model``): upgrade fills it in for jobs made before it that
named one of their tenant's adapters, and for no other job (a base-model job, a job of a
tenant without adapters, a job from before the tenant's first adapter); downgrade drops the
column and upgrade adds it again."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import create_engine, inspect

from service.store.migrate import downgrade, upgrade
from service.store.settings import to_libpq_url, to_sqlalchemy_url
from tests.support.services import create_empty_database, drop_database

FT = "ft:base-m:acme:tuned"
_TENANT = ("INSERT INTO tenants (id, name, tier, weight, created_at) "
           "VALUES (gen_random_uuid(), %s, 'standard', 1, now()) RETURNING id")
_JOB = """
INSERT INTO jobs (id, tenant_id, kind, service_tier, priority, endpoint, model, request, stream,
                  max_tokens, status, attempt, created_at, queued_at, updated_at)
VALUES (gen_random_uuid(), %(tenant)s, 'realtime', 'default', 0, 'chat.completions', 'base-m',
        %(request)s, false, 8, 'succeeded', 1, now() - %(ago)s * interval '1 day', now(), now())
RETURNING id"""


def _columns(url: str) -> set[str]:
    engine = create_engine(to_sqlalchemy_url(url))
    try:
        return {c["name"] for c in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()


def _job(conn: psycopg.Connection[Any], tenant: Any, model: str, ago_days: int) -> Any:
    request = psycopg.types.json.Jsonb({"model": model, "messages": []})
    return conn.execute(_JOB, {"tenant": tenant, "request": request, "ago": ago_days}
                        ).fetchone()[0]  # type: ignore[index]


def test_0019_fills_adapter_jobs_and_downgrades() -> None:
    url = create_empty_database()
    try:
        upgrade(url, "0018")
        with psycopg.connect(to_libpq_url(url), autocommit=True) as conn:
            acme = conn.execute(_TENANT, ("acme",)).fetchone()[0]  # type: ignore[index]
            other = conn.execute(_TENANT, ("other",)).fetchone()[0]  # type: ignore[index]
            conn.execute(
                "INSERT INTO lora_adapters (id, tenant_id, name, base_model, rank, "
                "target_modules, bytes, storage_key, status, created_at) VALUES "
                "(gen_random_uuid(), %s, 'tuned', 'base-m', 8, '[]', 1, 'k', 'ready', "
                "now() - interval '2 days')", (acme,))
            named = _job(conn, acme, FT, 1)
            base = _job(conn, acme, "base-m", 1)
            before_adapter = _job(conn, acme, FT, 5)  # cannot be the adapter's: left alone
            no_adapters = _job(conn, other, "ft:base-m:other:x", 1)
        upgrade(url, "0019")
        with psycopg.connect(to_libpq_url(url)) as conn:
            filled = dict(conn.execute("SELECT id, adapter_model FROM jobs").fetchall())
        assert filled == {named: FT, base: None, before_adapter: None, no_adapters: None}

        downgrade(url, "0018")
        assert "adapter_model" not in _columns(url)
        upgrade(url)
        assert "adapter_model" in _columns(url)
    finally:
        drop_database(url)
