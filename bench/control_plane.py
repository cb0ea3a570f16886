"""Throughput of the control plane alone: how many realtime jobs per second one API process,
one dispatcher, Postgres, Redis and N simulated workers carry on this box, and which process
runs out of CPU first.

    python bench/control_plane.py [--levels 4,8,16,32,64] [--rounds 3] [--round-s 5]
                                  [--workers 2] [--slots 64] [--api-workers 1] [--metrics]

``--api-workers N`` serves the API from N processes behind its one port (`fairway api
--workers N`); the "api" CPU group is all of them. ``--metrics`` turns metrics on (off by
default, as the floor this bench measures), merged across those processes when N > 1.

A private stack (embedded Postgres and Redis, as bench/overload.py) whose simulated engines
cost nothing: FAIRWAY_SIM_SPEED=inf, so an engine step only yields to its event loop and
every millisecond measured is the control plane's (and the load generator's). A closed loop
of `concurrency` clients (by default the lean client of bench/lean_client.py, a keep-alive
connection each; `--client httpx` for the httpx pool that runs before 2026-12-01 used), each
sending one short streamed realtime chat request (max_tokens 1-4) after another, is ramped
until jobs/s stops rising by `--min-gain`. Per level: jobs/s end to end (completed streams,
median of `--rounds` windows), latency p50/p99 (request to [DONE]), each process group's CPU
(psutil, in cores), and Postgres work per job (pg_stat_database commits and rows written,
WAL bytes) and Redis commands per job (INFO commandstats) over the same windows.

The box is shared: "other" is whatever else ran on it during the windows (not ours).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cp_probe import (  # noqa: E402
    CpuMeter,
    PgSnapshot,
    pg_delta,
    pg_settings,
    pg_snapshot,
    postmaster_pid,
    redis_calls,
)
from harness import pct  # noqa: E402
from lean_client import LeanConnection  # noqa: E402
from overload import capacity_tenant  # noqa: E402

from service.cli.embedded import EmbeddedServers  # noqa: E402
from service.store.migrate import upgrade  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from tests.support.stack import Stack, wait_until  # noqa: E402

MODEL = "sim-model"


@dataclass
class Load:
    """Counters the client tasks share (one event loop: no locks needed)."""

    done: int = 0
    failed: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (end time, seconds)
    errors: dict[str, int] = field(default_factory=dict)


def request_body(rng: random.Random) -> dict[str, object]:
    return {"model": MODEL, "stream": True, "max_tokens": rng.randint(1, 4), "temperature": 0,
            "messages": [{"role": "user", "content": f"ping {rng.random():.6f}"}]}


def _count(load: Load, t0: float, finished: bool, error: str | None = None) -> None:
    if error is not None:
        load.errors[error] = load.errors.get(error, 0) + 1
    if finished:
        t1 = time.perf_counter()
        load.done += 1
        load.latencies.append((t1, t1 - t0))
    else:
        load.failed += 1


async def one_lean(conn: LeanConnection, key: str, rng: random.Random, load: Load) -> None:
    """One request by the lean client (bench/lean_client.py): the default load generator."""
    t0 = time.perf_counter()
    try:
        answer = await conn.post_json("/v1/chat/completions", request_body(rng),
                                      {"authorization": f"Bearer {key}"})
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        _count(load, t0, False, type(exc).__name__)
        return
    if answer.status != 200:
        _count(load, t0, False, answer.error_code())
    elif b'"error"' in answer.body:
        _count(load, t0, answer.done, "stream error")
    else:
        _count(load, t0, answer.done)


async def one(client: httpx.AsyncClient, key: str, rng: random.Random, load: Load) -> None:
    body = request_body(rng)
    t0 = time.perf_counter()
    finished, error = False, None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body,
                                 headers={"authorization": f"Bearer {key}"}) as resp:
            if resp.status_code != 200:
                raw = await resp.aread()
                code = json.loads(raw).get("error", {}).get("code") or str(resp.status_code)
                _count(load, t0, False, code)
                return
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    finished = True
                elif line.startswith("data: ") and '"error"' in line:
                    error = "stream error"
    except httpx.HTTPError as exc:
        error = type(exc).__name__
    _count(load, t0, finished, error)


async def client_loop(client: httpx.AsyncClient | None, base: str, key: str, seed: int,
                      load: Load, stop: asyncio.Event) -> None:
    """One closed-loop client: httpx's shared pool when given ``client``, else its own lean
    connection."""
    rng = random.Random(seed)
    conn = LeanConnection(base) if client is None else None
    try:
        while not stop.is_set():
            if conn is not None:
                await one_lean(conn, key, rng, load)
            else:
                assert client is not None
                await one(client, key, rng, load)
    finally:
        if conn is not None:
            await conn.close()


@dataclass
class Window:
    jobs_s: float
    latencies_ms: list[float]


@dataclass
class LevelResult:
    concurrency: int
    windows: list[Window]
    cpu_s: dict[str, float]
    box_busy_s: float
    wall_s: float
    jobs: int
    pg: PgSnapshot
    redis_calls: dict[str, int]
    failed: int
    errors: dict[str, int]

    @property
    def jobs_s(self) -> float:
        return statistics.median(w.jobs_s for w in self.windows)


async def run_level(base: str, key: str, concurrency: int, rounds: int, round_s: float,
                    meter: CpuMeter, database_url: str, redis_url: str,
                    client_kind: str = "lean") -> LevelResult:
    load, stop = Load(), asyncio.Event()
    pool = concurrency + 8
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        shared = client if client_kind == "httpx" else None
        tasks = [asyncio.create_task(client_loop(shared, base, key, i, load, stop))
                 for i in range(concurrency)]
        await asyncio.sleep(1.5)  # warm: connections, pools, the first flush of pg stats
        pg0 = await asyncio.to_thread(pg_snapshot, database_url)
        redis0 = await asyncio.to_thread(redis_calls, redis_url)
        meter.start()
        done0, windows = load.done, []
        for _ in range(rounds):
            t0, n0 = time.perf_counter(), load.done
            await asyncio.sleep(round_s)
            t1 = time.perf_counter()
            windows.append(Window((load.done - n0) / (t1 - t0),
                                  [s * 1000 for end, s in load.latencies if t0 <= end < t1]))
        jobs = load.done - done0
        meter.stop()
        pg1 = await asyncio.to_thread(pg_snapshot, database_url)
        redis1 = await asyncio.to_thread(redis_calls, redis_url)
        stop.set()
        await asyncio.gather(*tasks)
    return LevelResult(concurrency, windows, meter.seconds(), meter.box_busy_s(), meter.wall_s,
                       jobs, pg_delta(pg0, pg1),
                       {k: n - redis0.get(k, 0) for k, n in redis1.items() if n > redis0.get(k, 0)},
                       load.failed, load.errors)


def idle_cores(meter: CpuMeter, seconds: float) -> dict[str, float]:
    """Each group's CPU with no load at all: heartbeats, polls, upkeep."""
    meter.start()
    time.sleep(seconds)
    meter.stop()
    return {name: s / meter.wall_s for name, s in meter.seconds().items()}


def print_level(r: LevelResult, idle: dict[str, float]) -> None:
    lat = [ms for w in r.windows for ms in w.latencies_ms]
    rounds = " / ".join(f"{w.jobs_s:.0f}" for w in r.windows)
    print(f"\nconcurrency {r.concurrency}: {r.jobs_s:.1f} jobs/s median ({rounds}), latency "
          f"p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms; {r.failed} failed "
          f"{r.errors or ''}")
    ours = sum(r.cpu_s.values())
    parts = [f"{name} {s / r.wall_s:.2f}" for name, s in
             sorted(r.cpu_s.items(), key=lambda kv: -kv[1])]
    other = max(0.0, r.box_busy_s - ours) / r.wall_s
    print(f"  CPU (cores, of {os.cpu_count()}): " + ", ".join(parts)
          + f"; other processes {other:.2f}; box busy {r.box_busy_s / r.wall_s:.2f}")
    per_job = {name: s / r.jobs * 1e3 for name, s in r.cpu_s.items()} if r.jobs else {}
    print("  CPU ms per job: " + ", ".join(f"{k} {v:.2f}" for k, v in per_job.items())
          + f"; control plane (api+dispatcher+workers+postgres+redis) "
          f"{sum(v for k, v in per_job.items() if k != 'load generator'):.2f}")
    net = {name: (s - idle.get(name, 0.0) * r.wall_s) / r.jobs * 1e3
           for name, s in r.cpu_s.items()} if r.jobs else {}
    print("  CPU ms per job above idle: " + ", ".join(f"{k} {v:.2f}" for k, v in net.items())
          + f"; control plane {sum(v for k, v in net.items() if k != 'load generator'):.2f}")
    if r.jobs:
        t = r.pg.totals
        print(f"  Postgres per job: {t['xact_commit'] / r.jobs:.2f} commits, "
              f"{t['tup_inserted'] / r.jobs:.2f} rows inserted, "
              f"{t['tup_updated'] / r.jobs:.2f} updated, {t['tup_deleted'] / r.jobs:.2f} "
              f"deleted, {t['wal_bytes'] / r.jobs / 1024:.1f} KiB WAL, "
              # Each new connection forks a backend: a pool that overflows pays it per job.
              f"{t['sessions'] / r.jobs:.3f} connections opened")
        tables = sorted(((n, w / r.jobs) for n, w in r.pg.tables.items() if w), key=lambda x: -x[1])
        print("  rows written per job by table: "
              + ", ".join(f"{n} {w:.2f}" for n, w in tables))
        calls = sorted(r.redis_calls.items(), key=lambda kv: -kv[1])
        print(f"  Redis per job: {sum(r.redis_calls.values()) / r.jobs:.1f} commands ("
              + ", ".join(f"{k} {n / r.jobs:.1f}" for k, n in calls[:10]) + ")")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="4,8,16,32,64",
                        help="client concurrencies to ramp through")
    parser.add_argument("--rounds", type=int, default=3, help="measured windows per level")
    parser.add_argument("--round-s", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2, help="simulated workers")
    parser.add_argument("--slots", type=int, default=64, help="engine slots per worker")
    parser.add_argument("--min-gain", type=float, default=0.05,
                        help="stop ramping once a level adds less than this fraction")
    parser.add_argument("--client", choices=("lean", "httpx"), default="lean",
                        help="the load generator's HTTP client: lean (bench/lean_client.py, a "
                             "connection per client) or httpx (what runs before 2026-12-01 used)")
    parser.add_argument("--api-workers", type=int, default=1,
                        help="API processes behind the one port (fairway api --workers)")
    parser.add_argument("--metrics", action="store_true", help="metrics on (default off)")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="fairway-cpbench-"))
    servers = EmbeddedServers(data_dir)
    servers.start(need_db=True, need_redis=True)
    upgrade(servers.database_url)
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": str(args.slots),
           "FAIRWAY_LOG_LEVEL": "WARNING",
           "FAIRWAY_METRICS_ENABLED": "true" if args.metrics else "false",
           "FAIRWAY_SIM_SPEED": "inf"}  # the zero-cost engine
    stack = Stack(servers.database_url, servers.redis_url, env_overrides=env)
    settings = Settings(database_url=servers.database_url)
    try:
        stack.start_api(args.api_workers)
        stack.start_dispatcher()
        for i in range(args.workers):
            stack.start_worker(f"cp-{i}")
        wait_until(lambda: httpx.get(stack.base_url + "/readyz").status_code == 200, 30,
                   "ready", stack)
        key = capacity_tenant(stack.base_url, settings)
        pgdata = data_dir / "pgdata"
        redis_pid = servers._redis.pid if servers._redis else 0
        groups = {
            "api": lambda: [stack.procs["api"].popen.pid],
            "dispatcher": lambda: [stack.procs["scheduler"].popen.pid],
            "workers": lambda: [p.popen.pid for n, p in stack.procs.items()
                                if n.startswith("worker-")],
            "postgres": lambda: [postmaster_pid(pgdata)],
            "redis": lambda: [redis_pid],
            "load generator": lambda: [os.getpid()],
        }
        print(f"stack: {args.api_workers} API process(es) behind one port (metrics "
              f"{'on' if args.metrics else 'off'}), 1 dispatcher, {args.workers} simulated "
              f"workers x "
              f"{args.slots} slots, sim speed inf; Postgres {pg_settings(servers.database_url)}")
        print(f"load: closed loop, streamed chat completions, max_tokens 1-4, "
              f"{args.rounds} windows of {args.round_s:g} s per level, {args.client} client")
        idle = idle_cores(CpuMeter(groups), 4.0)
        print("idle CPU (cores): " + ", ".join(f"{k} {v:.3f}" for k, v in idle.items()))
        results: list[LevelResult] = []
        for level in (int(x) for x in args.levels.split(",")):
            r = asyncio.run(run_level(stack.base_url, key, level, args.rounds, args.round_s,
                                      CpuMeter(groups), servers.database_url,
                                      servers.redis_url, args.client))
            print_level(r, idle)
            results.append(r)
            best = max(x.jobs_s for x in results[:-1]) if len(results) > 1 else 0.0
            if best and r.jobs_s < best * (1 + args.min_gain):
                print(f"\nthroughput stopped rising (< {args.min_gain:.0%} gain): stop ramping")
                break
        top = max(results, key=lambda x: x.jobs_s)
        busiest = max(top.cpu_s.items(), key=lambda kv: kv[1])
        print(f"\npeak: {top.jobs_s:.1f} jobs/s at concurrency {top.concurrency}; busiest "
              f"process group there: {busiest[0]} at {busiest[1] / top.wall_s:.2f} cores")
    finally:
        stack.stop()
        servers.stop()


if __name__ == "__main__":
    main()
