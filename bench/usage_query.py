"""The usage API's query at scale: one tenant's page of 1m, 1h and 1d buckets over a jobs table
of many tenants, and the index Postgres picks for it.

    python bench/usage_query.py                        # 1M ended jobs, 50 tenants, 31 days
    python bench/usage_query.py --jobs 200000 --runs 5
    python bench/usage_query.py --jobs 200000 --runs 21 --adapters

A throwaway database on the test Postgres is filled by one INSERT ... SELECT with ``--jobs``
ended jobs spread evenly over ``--tenants`` tenants and the last ``--days`` days. Then, for
one tenant, the page the API reads (service.usage.completions.usage_page, grouped by model)
is timed for: the last 1,440 minutes (1m, one full page), 168 hours (1h) and 31 days (1d),
median of ``--runs``; and EXPLAIN names the plan's index. The database is dropped at the end.

``--adapters``: every third job ran with a tenant's adapter (``adapter_model`` set, shown under
its ft: name) and every request carries about 2 KB of incompressible messages, as real ones
do; each page is then timed a second time grouped by the request JSON's ``model`` instead
(``json_model_ms``: the design without the ``adapter_model`` column, which must read, and
detoast, every request of the range).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402

import service.usage.completions as completions  # noqa: E402
from service.store.models.jobs import Job  # noqa: E402
from service.store.settings import to_libpq_url  # noqa: E402
from service.usage.completions import UsageQuery, usage_page, usage_statement  # noqa: E402
from tests.support.services import PATIENT_PLAN, create_database, drop_database  # noqa: E402

_FILL = ("""
INSERT INTO tenants (id, name, tier, weight, created_at)
SELECT gen_random_uuid(), 'bench-' || i, %(plan)s, 1, now()
FROM generate_series(1, %(tenants)s) i""", """
INSERT INTO jobs (id, tenant_id, kind, service_tier, priority, endpoint, model, adapter_model,
                  request, stream, max_tokens, status, attempt, prompt_tokens,
                  completion_tokens, cached_tokens, created_at, queued_at, finished_at,
                  updated_at, usage_xid)
SELECT gen_random_uuid(), t.ids[1 + i %% %(tenants)s], CASE WHEN i %% 4 = 0 THEN 'batch'
       ELSE 'realtime' END, 'default', 0, 'chat.completions', 'model-' || (i %% 3), a.name,
       CASE WHEN %(adapters)s THEN jsonb_build_object(
         'model', coalesce(a.name, 'model-' || (i %% 3)), 'messages', jsonb_build_array(
           jsonb_build_object('role', 'user', 'content', (
             SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 64 + i * 0)))))
       ELSE '{}' END,
       false, 64, 'succeeded', 1, 100 + i %% 50, 20 + i %% 30, 0,
       now() - (i::float / %(jobs)s) * %(days)s * interval '1 day',
       now() - (i::float / %(jobs)s) * %(days)s * interval '1 day', now(), now(), 1
FROM generate_series(1, %(jobs)s) i,
     (SELECT array_agg(id) AS ids FROM tenants WHERE name LIKE 'bench-%%') t,
     LATERAL (SELECT CASE WHEN %(adapters)s AND i %% 3 = 0
                          THEN 'ft:model-0:bench:a' || (i %% 2) END AS name) a""",
         "ANALYZE jobs")
CASES = (("1m", 60, 1440), ("1h", 3600, 168), ("1d", 86400, 31))


async def _median_ms(session: AsyncSession, query: UsageQuery, tenant: uuid.UUID, runs: int
                     ) -> tuple[float, dict[str, Any]]:
    times: list[float] = []
    page: dict[str, Any] = {}
    for _ in range(runs):
        began = time.perf_counter()
        page = await usage_page(session, query, tenant_id=tenant)
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 1), page


async def _by_request_json(session: AsyncSession, query: UsageQuery, tenant: uuid.UUID,
                           runs: int) -> float:
    """The same page grouped by the request JSON's model (no adapter_model column)."""
    shown = completions.shown_model
    completions.shown_model = lambda: Job.request["model"].astext
    try:
        return (await _median_ms(session, query, tenant, runs))[0]
    finally:
        completions.shown_model = shown


async def _measure(url: str, runs: int, adapters: bool) -> dict[str, dict[str, object]]:
    engine = create_async_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    out: dict[str, dict[str, object]] = {}
    async with AsyncSession(engine) as session:
        tenant = (await session.execute(text(
            "SELECT id FROM tenants WHERE name = 'bench-1'"))).scalar_one()
        now = int(time.time())
        for width, seconds, buckets in CASES:
            query = UsageQuery(start_time=now - (buckets - 1) * seconds, end_time=now + 1,
                               bucket_width=width, limit=buckets, group_by=("model",))
            median_ms, page = await _median_ms(session, query, tenant, runs)
            stmt = usage_statement(query, query.window(), tenant).compile(
                engine.sync_engine, compile_kwargs={"literal_binds": True})
            plan = "\n".join(r[0] for r in await session.execute(text(f"EXPLAIN {stmt}")))
            index = next((w for w in plan.split() if w.startswith("ix_jobs")), "no index")
            requests = sum(r["num_model_requests"] for b in page["data"] for r in b["results"])
            out[width] = {"buckets": buckets, "median_ms": median_ms,
                          "requests": requests, "index": index}
            if adapters:
                out[width]["json_model_ms"] = await _by_request_json(
                    session, query, tenant, runs)
    await engine.dispose()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=31)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--adapters", action="store_true",
                        help="a third of the jobs ran with adapters; requests of about 2 KB")
    args = parser.parse_args()
    url = create_database("fairway_bench_usage")
    try:
        began = time.perf_counter()
        with psycopg.connect(to_libpq_url(url), autocommit=True) as conn:
            for statement in _FILL:
                conn.execute(statement, {"plan": PATIENT_PLAN, "tenants": args.tenants,
                                         "jobs": args.jobs, "days": args.days,
                                         "adapters": args.adapters})
        fill_s = round(time.perf_counter() - began, 1)
        result = asyncio.run(_measure(url, args.runs, args.adapters))
        print(json.dumps({"jobs": args.jobs, "tenants": args.tenants, "days": args.days,
                          "adapters": args.adapters, "fill_s": fill_s, "one_tenant": result},
                         indent=2))
    finally:
        drop_database(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
