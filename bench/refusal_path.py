"""What one refusal at the door costs the API: the whole HTTP path of a realtime request the
SLO gate refuses (429 ``slo_unattainable``), in process, through the real app.

    python bench/refusal_path.py [--requests 2000] [--clients 1,50]

The app (service.api.app.create_app) runs in this process behind httpx's ASGI transport, on a
throwaway database on the test Postgres (FAIRWAY_TEST_PG_URL) and Redis db 12. An outlook
published for the model says the pool is far past capacity, so every request is refused at
the door. Printed per concurrency: refusals/s, wall latency p50/p99 and CPU ms per refusal
(process time / refusals): the cost the API pays per refusal, which under overload on a
shared box is what decides how fast refusals come back. Run it from two checkouts to compare
(``python OTHER/bench/refusal_path.py``), alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from sqlalchemy import text  # noqa: E402

from scheduler.outlook import RealtimeOutlook  # noqa: E402
from service.api.app import create_app  # noqa: E402
from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.store.db import sync_session  # noqa: E402
from service.store.heartbeats import encode_outlook  # noqa: E402
from service.store.keys import outlook_key  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from tests.support.services import create_database, drop_database, redis_url  # noqa: E402

MODEL = "sim-model"
BODY = {"model": MODEL, "stream": True, "max_tokens": 48,
        "messages": [{"role": "user", "content": "overload " * 20}]}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def overloaded(model: str) -> RealtimeOutlook:
    """A pool of 8 slots with 200 realtime jobs ahead: any 0.5 s target is far away."""
    return RealtimeOutlook(model=model, at=time.time() + 3600, workers=2, slots_total=8,
                           rt_load=200, rt_queued_prefill=0, mean_prompt_tokens=50,
                           job_service_s=1.0, step_s=0.02, prefill_per_token_s=1e-4,
                           prefill_step_s=0.01, token_budget=512)


async def drive(client: httpx.AsyncClient, key: str, clients: int, n: int
                ) -> tuple[list[float], float, float]:
    latencies: list[float] = []
    remaining = n
    headers = {"authorization": f"Bearer {key}"}

    async def one_client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            resp = await client.post("/v1/chat/completions", json=BODY, headers=headers)
            latencies.append((time.perf_counter() - t0) * 1000)
            if resp.status_code != 429:
                raise RuntimeError(f"expected a refusal, got {resp.status_code}: {resp.text}")

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return latencies, time.process_time() - cpu0, time.perf_counter() - wall0


async def bench(settings: Settings, key: str, levels: list[int], n: int) -> None:
    redis = Redis.from_url(settings.redis_url)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fairway") as client:
            async def publish() -> None:
                while True:
                    await redis.set(outlook_key(MODEL), encode_outlook(overloaded(MODEL)))
                    await asyncio.sleep(0.05)

            publisher = asyncio.create_task(publish())
            await asyncio.sleep(0.1)
            await drive(client, key, 10, 200)  # warm pools, caches and scripts
            print(f"{'clients':>8}{'refusals/s':>12}{'p50 ms':>9}{'p99 ms':>9}"
                  f"{'CPU ms/refusal':>16}")
            for clients in levels:
                lat, cpu, wall = await drive(client, key, clients, n)
                print(f"{clients:>8}{len(lat) / wall:>12.0f}{pct(lat, 50):>9.2f}"
                      f"{pct(lat, 99):>9.2f}{cpu * 1000 / len(lat):>16.2f}")
            publisher.cancel()
    await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", default="1,50")
    args = parser.parse_args()
    db_url = create_database("fairway_refusal")
    os.environ.update(FAIRWAY_SERVED_MODEL_NAME=MODEL, FAIRWAY_METRICS_ENABLED="false",
                      FAIRWAY_LOG_LEVEL="WARNING")
    settings = Settings(database_url=db_url, redis_url=redis_url(12))
    try:
        # A plan that sheds by its TTFT target: the built-in plans queue, and a queueing plan
        # would admit these requests (their wait is within its budget), not refuse them.
        with sync_session(db_url) as session:
            session.execute(text("UPDATE tiers SET admission_mode = 'shed' "
                                 "WHERE name = 'premium'"))
            session.commit()
        _, key = create_tenant_with_key(settings, f"refusal-{uuid.uuid4().hex[:6]}",
                                        plan="premium")
        asyncio.run(bench(settings, key, [int(c) for c in args.clients.split(",")],
                          args.requests))
    finally:
        drop_database(db_url)


if __name__ == "__main__":
    main()
