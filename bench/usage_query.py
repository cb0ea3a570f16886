"""The usage API's query at scale: one tenant's page of 1m, 1h and 1d buckets over a jobs table
of many tenants, and the index Postgres picks for it.

    python bench/usage_query.py                        # 1M ended jobs, 50 tenants, 31 days
    python bench/usage_query.py --jobs 200000 --runs 5

A throwaway database on the test Postgres is filled by one INSERT ... SELECT with ``--jobs``
ended jobs spread evenly over ``--tenants`` tenants and the last ``--days`` days. Then, for
one tenant, the page the API reads (service.usage.completions.usage_page, grouped by model)
is timed for: the last 1,440 minutes (1m, one full page), 168 hours (1h) and 31 days (1d),
median of ``--runs``; and EXPLAIN names the plan's index. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402

from service.store.settings import to_libpq_url  # noqa: E402
from service.usage.completions import UsageQuery, usage_page, usage_statement  # noqa: E402
from tests.support.services import PATIENT_PLAN, create_database, drop_database  # noqa: E402

_FILL = ("""
INSERT INTO tenants (id, name, tier, weight, created_at)
SELECT gen_random_uuid(), 'bench-' || i, %(plan)s, 1, now()
FROM generate_series(1, %(tenants)s) i""", """
INSERT INTO jobs (id, tenant_id, kind, service_tier, priority, endpoint, model, request, stream,
                  max_tokens, status, attempt, prompt_tokens, completion_tokens, cached_tokens,
                  created_at, queued_at, finished_at, updated_at, usage_xid)
SELECT gen_random_uuid(), t.ids[1 + i %% %(tenants)s], CASE WHEN i %% 4 = 0 THEN 'batch'
       ELSE 'realtime' END, 'default', 0, 'chat.completions', 'model-' || (i %% 3), '{}',
       false, 64, 'succeeded', 1, 100 + i %% 50, 20 + i %% 30, 0,
       now() - (i::float / %(jobs)s) * %(days)s * interval '1 day',
       now() - (i::float / %(jobs)s) * %(days)s * interval '1 day', now(), now(), 1
FROM generate_series(1, %(jobs)s) i,
     (SELECT array_agg(id) AS ids FROM tenants WHERE name LIKE 'bench-%%') t""",
         "ANALYZE jobs")
CASES = (("1m", 60, 1440), ("1h", 3600, 168), ("1d", 86400, 31))


async def _measure(url: str, runs: int) -> dict[str, object]:
    engine = create_async_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    out: dict[str, object] = {}
    async with AsyncSession(engine) as session:
        tenant = (await session.execute(text(
            "SELECT id FROM tenants WHERE name = 'bench-1'"))).scalar_one()
        now = int(time.time())
        for width, seconds, buckets in CASES:
            query = UsageQuery(start_time=now - (buckets - 1) * seconds, end_time=now + 1,
                               bucket_width=width, limit=buckets, group_by=("model",))
            times, page = [], None
            for _ in range(runs):
                began = time.perf_counter()
                page = await usage_page(session, query, tenant_id=tenant)
                times.append((time.perf_counter() - began) * 1000)
            stmt = usage_statement(query, query.window(), tenant).compile(
                engine.sync_engine, compile_kwargs={"literal_binds": True})
            plan = "\n".join(r[0] for r in await session.execute(text(f"EXPLAIN {stmt}")))
            index = next((w for w in plan.split() if w.startswith("ix_jobs")), "no index")
            requests = sum(r["num_model_requests"] for b in page["data"]  # type: ignore[index]
                           for r in b["results"])
            out[width] = {"buckets": buckets, "median_ms": round(statistics.median(times), 1),
                          "requests": requests, "index": index}
    await engine.dispose()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=31)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    url = create_database("fairway_bench_usage")
    try:
        began = time.perf_counter()
        with psycopg.connect(to_libpq_url(url), autocommit=True) as conn:
            for statement in _FILL:
                conn.execute(statement, {"plan": PATIENT_PLAN, "tenants": args.tenants,
                                         "jobs": args.jobs, "days": args.days})
        fill_s = round(time.perf_counter() - began, 1)
        result = asyncio.run(_measure(url, args.runs))
        print(json.dumps({"jobs": args.jobs, "tenants": args.tenants, "days": args.days,
                          "fill_s": fill_s, "one_tenant": result}, indent=2))
    finally:
        drop_database(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
