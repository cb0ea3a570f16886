"""Overhead of metrics on the request path: p50 with and without them.

    python bench/metrics_overhead.py [--requests 300] [--rounds 6] [--max-tokens 16]

Two measurements:

1. In process (precise): what the instrumentation of one request costs in CPU time, i.e. the
   API's observer (TTFT, E2E, TPOT, SLO, in-flight) plus the worker's (queue time, dispatch
   lag, one ITL per output token, prefix cache, outcome), with metrics on and off.
2. End to end (what a client sees): two identical stacks run side by side (API + dispatcher +
   sim-engine worker, each with its own throwaway database and Redis db), one with
   FAIRWAY_METRICS_ENABLED=true and one with false. Sequential non-streamed requests
   alternate between them in rounds, so both see the same machine load; it prints p50/p90
   per stack and the difference.

Needs the test Postgres (FAIRWAY_TEST_PG_URL) and Redis (FAIRWAY_TEST_REDIS_URL); the Redis
dbs are FAIRWAY_BENCH_REDIS_DBS (default "9,10"), flushed first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from service.observability.requests import observe_request  # noqa: E402
from service.store.telemetry import state  # noqa: E402
from service.store.telemetry.slo_rules import SloTargets  # noqa: E402
from worker.metrics import observe_job  # noqa: E402

MODEL = "sim-bench"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_request(tokens: int) -> None:
    now = dt.datetime.now(dt.UTC)
    obs = observe_request(model=MODEL, tenant="t-bench", job_class="realtime", tier="default",
                          targets=SloTargets(60.0, 1.0), deadline_s=600.0)
    row = SimpleNamespace(model=MODEL, kind="realtime", tenant_id="t-bench",
                          service_tier="default", created_at=now, assigned_at=now,
                          deadline_at=None, first_token_at=None, batch_id=None)
    job = observe_job(row, attempt=1, now=now)
    for _ in range(tokens):
        if job is not None:
            job.output()
        obs.first_token()
    if job is not None:
        job.finished("succeeded", prompt_tokens=20, cached_tokens=0)
    obs.finished(ok=True, completion_tokens=tokens)


def in_process(tokens: int, n: int = 20000) -> dict[str, float]:
    out = {}
    for flag in (True, False):
        state.set_enabled(flag)
        one_request(tokens)
        t0 = time.perf_counter()
        for _ in range(n):
            one_request(tokens)
        out["on" if flag else "off"] = (time.perf_counter() - t0) / n * 1e6
    state.set_enabled(True)
    return out


def end_to_end(requests: int, rounds: int, max_tokens: int) -> dict[str, list[float]]:
    import openai
    from redis import Redis

    from service.cli.bootstrap import create_tenant_with_key
    from service.store.settings import EngineSettings, Settings
    from tests.support.services import create_database, drop_database, redis_url
    from tests.support.stack import Stack

    dbs = [int(x) for x in os.environ.get("FAIRWAY_BENCH_REDIS_DBS", "9,10").split(",")]
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_SIM_SPEED": "1000",
           "FAIRWAY_HEARTBEAT_SECONDS": "0.5", "FAIRWAY_LOG_LEVEL": "WARNING"}
    stacks: dict[str, Stack] = {}
    clients: dict[str, openai.OpenAI] = {}
    databases = []
    try:
        for (name, flag), db in zip((("on", "true"), ("off", "false")), dbs, strict=True):
            database = create_database("fairway_bench_metrics")
            databases.append(database)
            redis = redis_url(db)
            Redis.from_url(redis).flushdb()
            stack = Stack(database, redis, env_overrides={**env,
                                                          "FAIRWAY_METRICS_ENABLED": flag})
            stacks[name] = stack
            stack.start_api()
            stack.start_dispatcher()
            stack.start_worker(f"bench-metrics-{name}")
            settings = Settings(database_url=database, redis_url=redis,
                                engine=EngineSettings(kind="sim", served_model_name=MODEL))
            _, key = create_tenant_with_key(settings, f"bench-{uuid.uuid4().hex[:8]}")
            clients[name] = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key,
                                          max_retries=0, timeout=60)
        latencies: dict[str, list[float]] = {"on": [], "off": []}
        messages = [{"role": "user", "content": "Say hello in five words."}]
        for client in clients.values():  # warm up: connections, caches, first claims
            for _ in range(10):
                client.chat.completions.create(model=MODEL, messages=messages,
                                               max_tokens=max_tokens)
        per_round = max(1, requests // rounds)
        for r in range(rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for name in order:
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    clients[name].chat.completions.create(model=MODEL, messages=messages,
                                                          max_tokens=max_tokens)
                    latencies[name].append(time.perf_counter() - t0)
        return latencies
    finally:
        for stack in stacks.values():
            stack.stop()
        for database in databases:
            drop_database(database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="per stack")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--skip-e2e", action="store_true")
    args = parser.parse_args()

    micro = in_process(args.max_tokens)
    print(f"in process, one request with {args.max_tokens} output tokens: "
          f"metrics on {micro['on']:.1f} us, off {micro['off']:.1f} us, "
          f"added {micro['on'] - micro['off']:.1f} us")
    if args.skip_e2e:
        return
    lat = end_to_end(args.requests, args.rounds, args.max_tokens)
    on, off = (statistics.median(lat[k]) * 1e3 for k in ("on", "off"))
    print(f"end to end, {len(lat['on'])} requests per stack, max_tokens={args.max_tokens}, "
          f"sim engine:")
    for name in ("on", "off"):
        print(f"  metrics {name:3}: p50 {statistics.median(lat[name]) * 1e3:7.2f} ms   "
              f"p90 {pct(lat[name], 0.9) * 1e3:7.2f} ms")
    print(f"  p50 difference: {on - off:+.2f} ms ({(on - off) / off * 100:+.1f}%)")


if __name__ == "__main__":
    main()
