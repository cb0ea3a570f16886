"""What one refusal at the door costs the API: the whole HTTP path of a realtime request the
SLO gate refuses (429 ``slo_unattainable``), in process, through the real app.

    python bench/refusal_path.py [--requests 2000] [--clients 1,50]
    python bench/refusal_path.py --burst 400 [--idle 2.5]


The app (service.api.app.create_app) runs in this process behind httpx's ASGI transport, on a
throwaway database on the test Postgres (FAIRWAY_TEST_PG_URL) and Redis db 12. An outlook
published for the model says the pool is far past capacity, so every request is refused at
the door. Printed per concurrency: refusals/s, wall latency p50/p99 and CPU ms per refusal
(process time / refusals): the cost the API pays per refusal, which under overload on a
shared box is what decides how fast refusals come back. Run it from two checkouts to compare
(``python OTHER/bench/refusal_path.py``), alternating.

``--burst N``: N refusals sent into the app at once (ASGI, no HTTP), each stepped by hand
(bench/await_trace.py), the outlook published by a thread as the dispatcher would, after two
requests that cache the tenant's policy and ``--idle`` seconds of quiet (a tenant in use,
quiet a moment: past the door's 2 s policy hint and the outlook's 0.2 s). Printed: the
refusals' ``openai-processing-ms`` p50/p99, how many yielded to the event loop (each such
await waits, in a burst, behind the requests queued meanwhile), and where they waited. The
stepping costs CPU: the times are for comparing, the counts are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from redis import Redis as SyncRedis  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from sqlalchemy import text  # noqa: E402

from bench.await_trace import Trace, traced  # noqa: E402
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


def publishing(url: str, stop: threading.Event) -> None:
    """The dispatcher's part: an overloaded outlook every 0.1 s, off the app's event loop."""
    redis = SyncRedis.from_url(url)
    while not stop.is_set():
        redis.set(outlook_key(MODEL), encode_outlook(overloaded(MODEL)))
        stop.wait(0.1)
    redis.close()


async def asgi_post(app: Any, key: str, trace: Trace | None) -> tuple[int, int | None]:
    """One chat completion into the app by ASGI: its status and openai-processing-ms."""
    payload = json.dumps(BODY).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"fairway"), (b"authorization", f"Bearer {key}".encode()),
                         (b"content-type", b"application/json"),
                         (b"content-length", str(len(payload)).encode())]}
    messages = [{"type": "http.request", "body": payload, "more_body": False}]
    started: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # no disconnect: the client stays
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.append(message)

    call = app(scope, receive, send)
    await (traced(call, trace) if trace is not None else call)
    headers = dict(started[0]["headers"])
    processing = headers.get(b"openai-processing-ms")
    return started[0]["status"], int(processing) if processing is not None else None


async def burst(settings: Settings, key: str, n: int, idle_s: float) -> None:
    stop = threading.Event()
    publisher = threading.Thread(target=publishing, args=(settings.redis_url, stop))
    publisher.start()
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.3)  # the first outlook in
            for _ in range(2):  # the tenant's policy read, then cached
                await asgi_post(app, key, None)
            await asyncio.sleep(idle_s)
            traces = [Trace() for _ in range(n)]
            answers = await asyncio.gather(*(asgi_post(app, key, t) for t in traces))
    finally:
        stop.set()
        publisher.join()
    refused = [(ms, t) for (status, ms), t in zip(answers, traces, strict=True)
               if status == 429 and ms is not None]
    times = [float(ms) for ms, _ in refused]
    print(f"{n} at once: {len(refused)} refused; openai-processing-ms p50 "
          f"{pct(times, 50):.0f}, p99 {pct(times, 99):.0f} (stepped by hand: slower than "
          f"untraced)")
    yields = Counter(len(t.suspensions) for _, t in refused)
    print("yields to the event loop per refusal: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(yields.items())))
    waits: dict[str, list[float]] = defaultdict(list)
    for _, trace in refused:
        for site, suspension in zip(trace.site(), trace.suspensions, strict=True):
            waits[site].append(suspension.waited_s * 1000)
    for site, ms in sorted(waits.items(), key=lambda kv: -len(kv[1]))[:10]:
        print(f"  {len(ms):5d} x, mean {sum(ms) / len(ms):6.1f} ms: {site}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", default="1,50")
    parser.add_argument("--burst", type=int, default=0,
                        help="instead: this many refusals at once, and where they waited")
    parser.add_argument("--idle", type=float, default=2.5,
                        help="with --burst: seconds of quiet between the warm-up and it")
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
        if args.burst:
            asyncio.run(burst(settings, key, args.burst, args.idle))
        else:
            asyncio.run(bench(settings, key, [int(c) for c in args.clients.split(",")],
                              args.requests))
    finally:
        drop_database(db_url)


if __name__ == "__main__":
    main()
