"""Admission overhead per request at the door: auth alone vs auth + quota admission.

    python bench/admission_overhead.py [--clients 200] [--requests 20000]

Uses FAIRWAY_DATABASE_URL / FAIRWAY_REDIS_URL, or creates a throwaway database on the test
Postgres (FAIRWAY_TEST_PG_URL) and uses Redis db 12. It runs the same functions a request
runs, in one process with the API's async engine (pool of 20), with N concurrent clients:

- auth:        authenticate(key) -> tenant (one indexed SELECT; last-used stamp at most 1/min)
- auth+quota:  the above, then admit_request (plan+override SELECT, one Lua call) and the
               release at request end (two Redis calls), as _submit does.

It prints p50/p99 per request for both and the difference, i.e. what quotas add.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from redis.asyncio import Redis  # noqa: E402

from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.quotas.reservation import admit_request  # noqa: E402
from service.store.db import async_engine, async_sessionmaker_for, sync_session  # noqa: E402
from service.store.models.quotas import TenantQuota  # noqa: E402
from service.store.quota_store import QuotaStore  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from service.tenants.accounts import authenticate  # noqa: E402

UNLIMITED = {"requests_per_minute": None, "tokens_per_minute": None,
             "concurrent_requests": None, "monthly_tokens": 10**15}
BODY = {"messages": [{"role": "user", "content": "Say hello in five words."}]}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(n_clients: int, n_requests: int,
                one: Callable[[], Awaitable[None]]) -> tuple[list[float], float]:
    latencies: list[float] = []
    remaining = n_requests

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            await one()
            latencies.append((time.perf_counter() - t0) * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(n_clients)))
    return latencies, time.perf_counter() - start


async def bench(settings: Settings, key: str, clients: int, requests: int) -> None:
    maker = async_sessionmaker_for(settings.database_url)
    redis = Redis.from_url(settings.redis_url, max_connections=clients + 10)
    store = QuotaStore(redis)

    async def auth_only() -> None:
        async with maker() as session:
            assert await authenticate(session, clear_key=key, secret=settings.secret_key)

    async def auth_and_quota() -> None:
        async with maker() as session:
            tenant = await authenticate(session, clear_key=key, secret=settings.secret_key)
            admission = await admit_request(session, store, tenant=tenant, body=BODY,
                                            max_tokens=16, slot_ttl_s=660)
        await admission.release()

    modes = (("auth", auth_only), ("auth+quota", auth_and_quota))
    for _, fn in modes:
        await drive(clients, min(2000, requests), fn)  # warm the pools and the scripts
    for name, fn in modes:  # uncontended service time: one client
        lat, _ = await drive(1, 300, fn)
        print(f"1 client  {name:<12} p50 {pct(lat, 0.5):.2f} ms  p99 {pct(lat, 0.99):.2f} ms")
    # Alternate rounds, so load from anything else on the machine hits both modes alike.
    lats: dict[str, list[float]] = {name: [] for name, _ in modes}
    walls: dict[str, float] = {name: 0.0 for name, _ in modes}
    rounds = 4
    for _ in range(rounds):
        for name, fn in modes:
            lat, wall = await drive(clients, requests // rounds, fn)
            lats[name] += lat
            walls[name] += wall
    results = {name: (pct(lats[name], 0.5), pct(lats[name], 0.99), statistics.fmean(lats[name]),
                      len(lats[name]) / walls[name]) for name, _ in modes}
    print(f"{clients} concurrent clients, {requests} requests each mode ({rounds} alternating "
          f"rounds), one process, DB pool 20")
    print(f"{'mode':<12}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'req/s':>10}")
    for name, (p50, p99, mean, rps) in results.items():
        print(f"{name:<12}{p50:>9.2f}{p99:>9.2f}{mean:>9.2f}{rps:>10.0f}")
    a, q = results["auth"], results["auth+quota"]
    print(f"{'added':<12}{q[0] - a[0]:>9.2f}{q[1] - a[1]:>9.2f}{q[2] - a[2]:>9.2f}"
          f"{'':>10}  (ratio p50 {q[0] / a[0]:.2f}x, p99 {q[1] / a[1]:.2f}x)")
    await redis.aclose()
    await async_engine(settings.database_url).dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    db_url, redis_url = os.environ.get("FAIRWAY_DATABASE_URL"), os.environ.get("FAIRWAY_REDIS_URL")
    throwaway = None
    if not db_url:
        from tests.support.services import create_database, drop_database
        from tests.support.services import redis_url as rurl

        throwaway = db_url = create_database("fairway_bench")
        redis_url = redis_url or rurl(12)
    settings = Settings(database_url=db_url, redis_url=redis_url or "redis://127.0.0.1:6379/12")
    try:
        tenant_id, key = create_tenant_with_key(settings, f"bench-{os.getpid()}-{time.time_ns()}",
                                                plan="enterprise")
        with sync_session(settings.database_url) as session:
            session.add(TenantQuota(tenant_id=tenant_id, overrides=UNLIMITED))
            session.commit()
        asyncio.run(bench(settings, key, args.clients, args.requests))
    finally:
        if throwaway:
            drop_database(throwaway)


if __name__ == "__main__":
    main()
