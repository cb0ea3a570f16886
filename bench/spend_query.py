"""Spend's query at scale: the month's spend of every budgeted tenant (what the dispatcher's
budget check reads every FAIRWAY_BUDGET_CHECK_SECONDS) and one tenant's (its dashboard card),
over a jobs table of many tenants, each job at the price version in force when it ended.

    python bench/spend_query.py                        # 1M ended jobs, 50 tenants, 31 days
    python bench/spend_query.py --jobs 200000 --runs 5

A throwaway database on the test Postgres is filled by one INSERT ... SELECT with ``--jobs``
ended jobs spread evenly over ``--tenants`` tenants, three models and the last ``--days``
days, and two price versions per model (the second in force from halfway). Timed, median of
``--runs``: the spend lines of every tenant over the whole window (a month's budget check at
its end), and of one tenant (its card), with and without the key and day detail; then the
real budget check (this month so far, every tenant budgeted): reading the whole month, and as
the dispatcher runs it, the closed days read once (first) and then only yesterday and today
(steady). The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
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

from service.spend.budgets import check_budgets  # noqa: E402
from service.spend.closed_days import ClosedDays  # noqa: E402
from service.spend.queries import month_spend, spend_lines_sync  # noqa: E402
from service.store.db import sync_session  # noqa: E402
from service.store.settings import to_libpq_url  # noqa: E402
from tests.support.services import PATIENT_PLAN, create_database, drop_database  # noqa: E402

_FILL = ("""
INSERT INTO tenants (id, name, tier, weight, created_at)
SELECT gen_random_uuid(), 'bench-' || i, %(plan)s, 1, now()
FROM generate_series(1, %(tenants)s) i""", """
INSERT INTO jobs (id, tenant_id, kind, service_tier, priority, endpoint, model, request, stream,
                  max_tokens, status, attempt, prompt_tokens, completion_tokens, cached_tokens,
                  created_at, queued_at, finished_at, updated_at)
SELECT gen_random_uuid(), t.ids[1 + i %% %(tenants)s], CASE WHEN i %% 4 = 0 THEN 'batch'
       ELSE 'realtime' END, CASE WHEN i %% 7 = 0 THEN 'flex' ELSE 'default' END, 0,
       'chat.completions', 'model-' || (i %% 3), '{}', false, 64, 'succeeded', 1,
       100 + i %% 50, 20 + i %% 30, 0, f.at, f.at, f.at, f.at
FROM generate_series(1, %(jobs)s) i,
     LATERAL (SELECT now() - (i::float / %(jobs)s) * %(days)s * interval '1 day' AS at) f,
     (SELECT array_agg(id) AS ids FROM tenants WHERE name LIKE 'bench-%%') t""", """
INSERT INTO model_prices (model, input_per_mtok, output_per_mtok, batch_discount_pct,
                          flex_discount_pct, effective_from, created_by)
SELECT 'model-' || m, 0.1 * (v + 1), 0.4 * (v + 1), 50, 50,
       now() - (%(days)s - v * %(days)s / 2.0) * interval '1 day' - interval '1 hour', 'bench'
FROM generate_series(0, 2) m, generate_series(0, 1) v""", """
INSERT INTO tenant_budgets (tenant_id, monthly_limit, thresholds, hard_stop)
SELECT id, 1000000, '[50, 80, 100]', true FROM tenants WHERE name LIKE 'bench-%%'""",
         "ANALYZE jobs", "ANALYZE model_prices")


def _median_ms(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 1)


def _measure(url: str, days: int, runs: int) -> dict[str, object]:
    end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    start = end - dt.timedelta(days=days, seconds=2)
    out: dict[str, object] = {}
    with sync_session(url) as session:
        tenant = session.execute(text("SELECT id FROM tenants WHERE name = 'bench-1'")).scalar_one()
        every: dict[str, object] = {}
        out["every_tenant_ms"] = _median_ms(lambda: every.update(lines=spend_lines_sync(
            session, start=start, end=end)), runs)
        lines = every["lines"]
        out["lines"] = len(lines)  # type: ignore[arg-type]
        out["total_cost"] = str(sum(month_spend(lines).values()))  # type: ignore[arg-type]
        out["one_tenant_ms"] = _median_ms(lambda: spend_lines_sync(
            session, start=start, end=end, tenant_ids=[tenant]), runs)
        totals: dict[str, object] = {}
        out["every_tenant_totals_ms"] = _median_ms(lambda: totals.update(lines=spend_lines_sync(
            session, start=start, end=end, detail=False)), runs)
        out["totals_agree"] = month_spend(totals["lines"]) == month_spend(lines)  # type: ignore[arg-type]
        session.rollback()
        out["budget_check_this_month_ms"] = _median_ms(
            lambda: check_budgets(session, currency="USD"), runs)
        closed = ClosedDays()
        out["budget_check_first_ms"] = _median_ms(
            lambda: check_budgets(session, currency="USD", closed=closed), 1)
        out["budget_check_steady_ms"] = _median_ms(
            lambda: check_budgets(session, currency="USD", closed=closed), runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=31)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    url = create_database("fairway_bench_spend")
    try:
        began = time.perf_counter()
        with psycopg.connect(to_libpq_url(url), autocommit=True) as conn:
            for statement in _FILL:
                conn.execute(statement, {"plan": PATIENT_PLAN, "tenants": args.tenants,
                                         "jobs": args.jobs, "days": args.days})
        fill_s = round(time.perf_counter() - began, 1)
        result = _measure(url, args.days, args.runs)
        print(json.dumps({"jobs": args.jobs, "tenants": args.tenants, "days": args.days,
                          "fill_s": fill_s, **result}, indent=2))
    finally:
        drop_database(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
