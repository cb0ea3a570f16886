"""The dispatcher through Postgres and Redis at scale: bootstrap time, decisions/s and pass
latency with a deep queue of rows and a large pool of (fake) workers.

    python bench/dispatch_pg_scale.py                      # 1M queued rows, 1k workers x 64
    python bench/dispatch_pg_scale.py --jobs 100000 --runs 3

bench/sched_scale.py times the policy alone, in memory. Here the real dispatcher loop runs
(scheduler.dispatcher.loop.Dispatcher: its bootstrap, LISTEN wake-ups, scans, claims in
Postgres, hand-offs in Redis, batch tasks over Celery's Redis broker) against a throwaway
database on the test Postgres, filled with ``--jobs`` queued rows by COPY (``--tenants``
tenants, ``--rt-share`` of them realtime, the rest batch class), and ``--workers`` worker
heartbeats written to a Redis db of their own, each with ``--slots`` free slots. No worker
runs anything: the dispatcher places jobs until every slot is taken (workers x slots
decisions), which is the rate measured, from the first pass to the last that placed one.

Per run: bootstrap (the term's first reads: assignments, maintenance, the scan of queued
jobs), decisions/s, pass latency p50 / p99 / max (a whole ``step``: wake-ups, scans, policy,
claims, sends) and the policy's own share. Median of ``--runs`` runs; between runs the placed
rows go back to queued and Redis is emptied. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
from redis import Redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness import pct, raise_interrupt  # noqa: E402

from scheduler.dispatcher.loop import Dispatcher  # noqa: E402
from scheduler.types import Decision  # noqa: E402
from service.store import wakeups  # noqa: E402
from service.store.keys import worker_key  # noqa: E402
from service.store.settings import Settings, to_libpq_url  # noqa: E402
from service.store.telemetry.state import set_enabled  # noqa: E402
from tests.support.services import (  # noqa: E402
    PATIENT_PLAN,
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)

MODEL = "bench-model"
COLUMNS = ("id", "tenant_id", "kind", "service_tier", "priority", "endpoint", "model",
           "request", "stream", "max_tokens", "status", "attempt", "created_at", "queued_at",
           "updated_at", "ttft_slo_ms", "tpot_slo_ms", "slo_plan")


def fill(url: str, jobs: int, tenants: int, rt_share: float) -> float:
    """Tenants by INSERT, ``jobs`` queued rows by COPY; returns the COPY's seconds."""
    rng = random.Random(1)
    tenant_ids = [uuid.uuid4() for _ in range(tenants)]
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO tenants (id, name, tier, weight) VALUES (%s, %s, %s, %s)",
                            [(t, f"bench-{i}", PATIENT_PLAN, 1.0 + i % 4)
                             for i, t in enumerate(tenant_ids)])
        now = dt.datetime.now(dt.UTC)
        bodies = [json.dumps({"model": MODEL, "max_tokens": 64, "messages": [
            {"role": "user", "content": "x" * rng.randint(40, 2000)}]}) for _ in range(64)]
        started = time.perf_counter()
        with conn.cursor() as cur, cur.copy(
                f"COPY jobs ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for i in range(jobs):
                realtime = rng.random() < rt_share
                created = now - dt.timedelta(microseconds=jobs - i)
                copy.write_row((
                    uuid.uuid4(), tenant_ids[rng.randrange(tenants)],
                    "realtime" if realtime else "batch", "default" if realtime else "flex",
                    1 if realtime else 2, "chat.completions", MODEL, bodies[i % len(bodies)],
                    realtime, 64, "queued", 0, created, created, created,
                    3_600_000 if realtime else None, 60_000 if realtime else None,
                    PATIENT_PLAN if realtime else None))
        seconds = time.perf_counter() - started
        conn.execute("ANALYZE jobs")
    return seconds


def beat(redis: Redis, workers: int, slots: int) -> None:
    """One heartbeat per fake worker, all from the same moment (the dispatcher judges a beat's
    age against the newest one, not the clock, so they stay alive without refreshing)."""
    now = time.time()
    with redis.pipeline(transaction=False) as pipe:
        for w in range(workers):
            worker_id = f"bench-{w}"
            pipe.set(worker_key(worker_id), json.dumps({
                "worker_id": worker_id, "models": [MODEL], "max_slots": slots, "running": 0,
                "kv_capacity_tokens": 4_000_000, "kv_usage": 0.0, "ts": now,
                "incarnation": f"{worker_id}-1", "job_ids": []}))
        pipe.execute()


@dataclass
class Run:
    bootstrap_s: float
    decisions: int
    seconds: float
    passes_ms: list[float]
    policy_ms: list[float]

    @property
    def rate(self) -> float:
        return self.decisions / self.seconds if self.seconds else 0.0


def one_run(settings: Settings, target: int, timeout_s: float) -> Run:
    dispatcher = Dispatcher(settings)  # no leadership term: claims go through the pool
    counted = {"n": 0}
    act = dispatcher.sender.act

    def counting_act(decisions: list[Decision]) -> None:
        counted["n"] += len(decisions)
        act(decisions)

    dispatcher.sender.act = counting_act  # type: ignore[method-assign]
    schedule = dispatcher.policy.schedule
    policy_ms: list[float] = []

    def timed_schedule(now: float) -> list[Decision]:
        t0 = time.perf_counter()
        out = schedule(now)
        policy_ms.append((time.perf_counter() - t0) * 1e3)
        return out

    dispatcher.policy.schedule = timed_schedule  # type: ignore[method-assign]
    with psycopg.connect(to_libpq_url(settings.database_url),
                         autocommit=True) as listen:
        listen.execute(f"LISTEN {wakeups.CHANNEL}")
        t0 = time.perf_counter()
        dispatcher._bootstrap()
        bootstrap_s = time.perf_counter() - t0
        passes: list[float] = []
        first = last = None
        deadline = time.monotonic() + timeout_s
        while counted["n"] < target and time.monotonic() < deadline:
            before = counted["n"]
            t = time.perf_counter()
            dispatcher.step(listen, max_wait_s=0.0)
            passes.append((time.perf_counter() - t) * 1e3)
            if counted["n"] > before:
                first = first if first is not None else t
                last = time.perf_counter()
    seconds = (last - first) if first is not None and last is not None else 0.0
    return Run(bootstrap_s, counted["n"], seconds, passes, policy_ms)


def reset(url: str, redis: Redis, workers: int, slots: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE jobs SET status = 'queued', worker_id = NULL, attempt = 0, "
                     "lease_expires_at = NULL, assigned_at = NULL WHERE status <> 'queued'")
        conn.execute("VACUUM ANALYZE jobs")
    redis.flushdb()
    beat(redis, workers, slots)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=64, help="free slots per worker")
    parser.add_argument("--rt-share", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=300)
    parser.add_argument("--alternate-metrics", action="store_true",
                        help="every other run with metrics off: the leader's gauge refresh "
                             "counts every open job in Postgres every 2 s")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # a killed run still drops its database
    url = create_database("fairway_bench_dispatch")
    redis_url = claim_redis_db()
    redis = Redis.from_url(redis_url)
    try:
        copy_s = fill(url, args.jobs, args.tenants, args.rt_share)
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('jobs'))"
                               ).fetchone()
        size = row[0] if row else "?"
        print(f"box: {os.cpu_count()} cores (shared); {args.jobs} queued rows COPY'd in "
              f"{copy_s:.1f} s ({args.jobs / copy_s:.0f} rows/s; jobs table {size}), "
              f"{args.tenants} tenants, {args.rt_share:.0%} realtime; {args.workers} workers x "
              f"{args.slots} slots")
        settings = Settings(database_url=url,
                            redis_url=redis_url)
        target = args.workers * args.slots
        runs: list[Run] = []
        for i in range(args.runs):
            metrics = not (args.alternate_metrics and i % 2)
            set_enabled(metrics)
            reset(url, redis, args.workers, args.slots)
            run = one_run(settings, target, args.timeout_s)
            runs.append(run)
            print(f"run {i + 1} (metrics {'on' if metrics else 'off'}): bootstrap "
                  f"{run.bootstrap_s * 1e3:.0f} ms; {run.decisions} "
                  f"decisions in {run.seconds:.1f} s = {run.rate:.0f}/s; {len(run.passes_ms)} "
                  f"passes, p50 {pct(run.passes_ms, 50):.1f} ms, p99 "
                  f"{pct(run.passes_ms, 99):.1f} ms, max {max(run.passes_ms):.0f} ms; policy "
                  f"{sum(run.policy_ms) / max(1e-9, sum(run.passes_ms)):.0%} of pass time")
        if args.alternate_metrics:
            for on in (True, False):
                some = [r for i, r in enumerate(runs) if (i % 2 == 0) == on]
                print(f"metrics {'on' if on else 'off'}: median "
                      f"{statistics.median(r.rate for r in some):.0f} decisions/s, bootstrap "
                      f"{statistics.median(r.bootstrap_s for r in some) * 1e3:.0f} ms")
        print(f"\nmedian of {len(runs)}: bootstrap "
              f"{statistics.median(r.bootstrap_s for r in runs) * 1e3:.0f} ms, "
              f"{statistics.median(r.rate for r in runs):.0f} decisions/s, pass p50 "
              f"{statistics.median(pct(r.passes_ms, 50) for r in runs):.1f} ms, p99 "
              f"{statistics.median(pct(r.passes_ms, 99) for r in runs):.1f} ms")
    finally:
        drop_database(url)
        release_redis_db(redis_url)


if __name__ == "__main__":
    main()
