"""Where a realtime request's time to first token goes, hop by hop, from the traces. Tracing
on, exported to JSON-lines files the bench reads (FAIRWAY_OTEL_SPANS_DIR): no collector
needed.

    python bench/hop_latency.py [--engine sim|vllm] [--idle 40] [--load 200]
                                [--concurrency 16] [--idle-gap-ms 0] [--workers 2]
                                [--sim-speed inf]
                                [--no-tracing]

A private stack (embedded Postgres and Redis, as bench/control_plane.py), then streamed
realtime chat requests: `--idle` one after another, then `--load` from `--concurrency` clients
at once (a closed loop). Each request is one trace; its hops are the gaps between the ends of
consecutive hop spans, so they add up to the server's time to first token:

    door            the request's server span start -> fairway.api.door end (parse, auth, quotas)
    insert+notify   -> fairway.api.insert end (the row and its NOTIFY, committed)
    notify->disp.   -> fairway.dispatcher.receive end (NOTIFY delivered, row read, policy has it)
    decision        -> fairway.dispatcher.decide end (waiting for, and in, the policy's pass)
    claim+send      -> fairway.dispatcher.send end (the claim's UPDATE, the Celery publish)
    send->worker    -> fairway.worker.receive end (broker, Celery, the worker's claim)
    engine->1st tok -> fairway.worker.first_token end (tokenize, prefill, the first token out)
    relay->SSE      -> fairway.api.relay end (XADD, the relay's XREAD, the first chunk written)

An express job (placed at insert by the API) skips the dispatcher's hops: door, the API's
hand-off, then the worker's; since its first token leaves before the worker's claim (route
"express, claim aside"), the hops are door, hand-off, hand-off -> the worker's first token,
relay (which waits for the insert's commit), and the claim's own length is shown aside.

The sim engine runs at FAIRWAY_SIM_SPEED=inf by default (as bench/control_plane.py): an engine
step costs nothing, so the table is the control plane's. The box is shared: read medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
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

from harness import express_line, pct  # noqa: E402
from overload import capacity_tenant  # noqa: E402

from service.cli.embedded import EmbeddedServers  # noqa: E402
from service.store.migrate import upgrade  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from tests.support.spans import Span, by_trace, named, read_spans  # noqa: E402
from tests.support.stack import Stack, wait_until  # noqa: E402

MODEL = "sim-model"
HOPS = [  # (hop, the span whose end closes it)
    ("door", "fairway.api.door"),
    ("insert+notify", "fairway.api.insert"),
    ("notify->dispatcher", "fairway.dispatcher.receive"),
    ("decision", "fairway.dispatcher.decide"),
    ("claim+send", "fairway.dispatcher.send"),
    ("send->worker receive", "fairway.worker.receive"),
    ("worker->engine 1st token", "fairway.worker.first_token"),
    ("stream relay->SSE 1st byte", "fairway.api.relay"),
]
# A job placed at insert with an express ticket (service.jobs.express_handoff): the API hands it off
# alongside the insert, and the worker's claim waits for the insert's commit.
EXPRESS_HOPS = [HOPS[0], ("API hand-off (express)", "fairway.api.handoff"), *HOPS[5:]]
# Since 2026-12-02 an express job's first token leaves its worker before the claim
# (worker.claimed_job.may_send_unconfirmed): the claim is off the path, its own length shown.
EARLY_HOPS = [*EXPRESS_HOPS[:2], ("hand-off->worker 1st token (claim aside)",
                                  "fairway.worker.first_token"), HOPS[7]]
# The express insert runs beside the hand-off: its own length, not a hop of the sum.
ALONGSIDE = ("insert alongside (express, not summed)", "fairway.api.insert")
CLAIM_ASIDE = ("worker claim aside (express, not summed)", "fairway.worker.receive")
# Since 2026-12-03 the door's quota script sends the hand-off (quota_scripts.ADMIT_AND_HAND_OFF):
# the hand-off span is inside the door's, and the insert follows the door.
AT_DOOR_HOPS = [("door (quota script + hand-off)", "fairway.api.door"),
                ("door->worker 1st token (claim aside)", "fairway.worker.first_token"), HOPS[7]]
WITHIN_DOOR = ("hand-off script within the door (not summed)", "fairway.api.handoff")
AFTER_DOOR = ("insert after the door (not summed)", "fairway.api.insert")
ROWS = [*HOPS[:5], EXPRESS_HOPS[1], ALONGSIDE, *HOPS[5:7], EARLY_HOPS[2], CLAIM_ASIDE,
        AT_DOOR_HOPS[0], WITHIN_DOOR, AFTER_DOOR, AT_DOOR_HOPS[1], HOPS[7]]  # every route's
ROUTE_HOPS = {"dispatcher": HOPS, "express": EXPRESS_HOPS, "express, claim aside": EARLY_HOPS,
              "express at the door": AT_DOOR_HOPS}


@dataclass
class Phase:
    name: str
    started_ns: int = 0
    ended_ns: int = 0
    client_ttft_ms: list[float] = field(default_factory=list)
    failed: int = 0


async def one(client: httpx.AsyncClient, key: str, rng: random.Random, phase: Phase,
              max_tokens: int) -> None:
    body = {"model": MODEL, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": f"hop {rng.random():.6f}"}]}
    t0 = time.perf_counter()
    first: float | None = None
    done = False
    async with client.stream("POST", "/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {key}"}) as resp:
        if resp.status_code != 200:
            await resp.aread()
            phase.failed += 1
            return
        async for line in resp.aiter_lines():
            if first is None and line.startswith("data: {") and '"content"' in line:
                first = time.perf_counter()
            done = done or line == "data: [DONE]"
    if done and first is not None:
        phase.client_ttft_ms.append((first - t0) * 1000)
    else:
        phase.failed += 1


async def run_phase(base: str, key: str, phase: Phase, total: int, concurrency: int,
                    max_tokens: int, gap_s: float = 0.0) -> None:
    rng = random.Random(phase.name)
    left = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency + 4)

    async def client_loop(client: httpx.AsyncClient) -> None:
        for _ in left:
            await one(client, key, rng, phase, max_tokens)
            if gap_s:
                await asyncio.sleep(gap_s)

    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        await one(client, key, rng, Phase("warm"), max_tokens)  # connections, first-use costs
        phase.started_ns = time.time_ns()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        phase.ended_ns = time.time_ns()


def hop_times(spans: list[Span]) -> tuple[str, dict[str, float]] | None:
    """One trace's route (dispatcher or express) and hops (ms), or None when a hop is missing
    (e.g. a job found by the dispatcher's rescan rather than its NOTIFY)."""
    roots = [s for s in spans if s["parent_id"] is None and s["service"] == "fairway-api"]
    handoff, door = named(spans, "fairway.api.handoff"), named(spans, "fairway.api.door")
    route = "express" if handoff else "dispatcher"
    claim, first = named(spans, CLAIM_ASIDE[1]), named(spans, EARLY_HOPS[2][1])
    if handoff and door and handoff["end_ns"] <= door["end_ns"]:
        route = "express at the door"
    elif (route == "express" and claim is not None and first is not None
            and first["end_ns"] < claim["end_ns"]):
        route = "express, claim aside"
    hops = ROUTE_HOPS[route]
    ends = []
    for _hop, name in hops:
        span = named(spans, name)
        if span is None or not roots:
            return None
        ends.append(span["end_ns"])
    previous = roots[0]["start_ns"]
    out = {}
    for (hop, _name), end in zip(hops, ends, strict=True):
        out[hop] = (end - previous) / 1e6
        previous = end
    out["total (server TTFT)"] = (ends[-1] - roots[0]["start_ns"]) / 1e6
    insert = named(spans, ALONGSIDE[1])
    if route != "dispatcher" and insert is not None:
        alongside = ALONGSIDE if route != "express at the door" else AFTER_DOOR
        out[alongside[0]] = (insert["end_ns"] - insert["start_ns"]) / 1e6
    if route in ("express, claim aside", "express at the door") and claim is not None:
        out[CLAIM_ASIDE[0]] = (claim["end_ns"] - claim["start_ns"]) / 1e6
    if route == "express at the door" and handoff is not None:
        out[WITHIN_DOOR[0]] = (handoff["end_ns"] - handoff["start_ns"]) / 1e6
    return route, out


Traces = dict[str, list[dict[str, float]]]  # route -> each trace's hops


def phase_hops(spans_dir: Path, phase: Phase) -> tuple[Traces, int]:
    """The hops of the traces whose request started within ``phase``, by route; and how many
    of those traces were incomplete."""
    found: Traces = {}
    incomplete = 0
    for spans in by_trace(read_spans(spans_dir)).values():
        root = [s for s in spans if s["parent_id"] is None and s["service"] == "fairway-api"]
        if not root or not phase.started_ns <= root[0]["start_ns"] <= phase.ended_ns:
            continue
        if named(spans, "fairway.api.door") is None:  # not a completion (readyz, admin)
            continue
        timed = hop_times(spans)
        if timed is None:
            incomplete += 1
        else:
            found.setdefault(timed[0], []).append(timed[1])
    return found, incomplete


def print_table(results: list[tuple[Phase, Traces, int]]) -> None:
    """One pair of columns per phase and route (a hop the route does not take: -)."""
    columns = [(f"{p.name}, {route} ({len(traces)})", traces)
               for p, by_route, _ in results for route, traces in sorted(by_route.items())]
    print("\n| hop | " + " | ".join(f"{c} p50 | p99" for c, _ in columns) + " |")
    print("|---|" + "---:|" * (2 * len(columns)))
    for hop in [h for h, _ in ROWS] + ["total (server TTFT)"]:
        cells = []
        for _c, traces in columns:
            values = [t[hop] for t in traces if hop in t]
            cells += ([f"{pct(values, 50):.2f}", f"{pct(values, 99):.2f}"] if values
                      else ["-", "-"])
        print(f"| {hop} | " + " | ".join(cells) + " |")
    for p, by_route, incomplete in results:
        print(f"\n{p.name}: client TTFT (first content chunk, every route) p50 "
              f"{pct(p.client_ttft_ms, 50):.2f} ms, p99 {pct(p.client_ttft_ms, 99):.2f} ms; "
              f"{sum(map(len, by_route.values()))} complete traces, {incomplete} incomplete, "
              f"{p.failed} failed requests; hop sum = server TTFT by construction")
        for route, traces in sorted(by_route.items()):
            hops = ROUTE_HOPS[route]
            print(f"  {route}: median share of the server TTFT: " + ", ".join(
                f"{h} {statistics.median(t[h] / t['total (server TTFT)'] for t in traces):.0%}"
                for h, _ in hops))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--idle", type=int, default=40, help="sequential requests")
    parser.add_argument("--load", type=int, default=200, help="requests under load")
    parser.add_argument("--concurrency", type=int, default=16, help="clients under load")
    parser.add_argument("--idle-gap-ms", type=float, default=0.0,
                        help="pause after each idle request: a quiet service between requests "
                             "(what bench/idle_ttft_pairs.py sees), not back to back")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=64, help="engine slots per worker")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--sim-speed", default="inf", help="FAIRWAY_SIM_SPEED of sim workers")
    parser.add_argument("--no-tracing", action="store_true",
                        help="tracing off (its own cost out of the TTFT): client TTFT only")
    parser.add_argument("--keep", action="store_true",
                        help="keep the data directory (spans, per-trace hops) afterwards")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="fairway-hopbench-"))
    spans_dir = data_dir / "spans"
    servers = EmbeddedServers(data_dir)
    servers.start(need_db=True, need_redis=True)
    upgrade(servers.database_url)
    global MODEL
    env = {"FAIRWAY_MAX_NUM_SEQS": str(args.slots), "FAIRWAY_LOG_LEVEL": "WARNING",
           "FAIRWAY_METRICS_ENABLED": "false"}
    if not args.no_tracing:
        env["FAIRWAY_OTEL_SPANS_DIR"] = str(spans_dir)
    if args.engine == "sim":
        env |= {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_SIM_SPEED": args.sim_speed}
    else:  # the default model (SmolLM2-135M), a small KV cache as the e2e tests use
        MODEL = Settings().engine.served_model_name
        env |= {"FAIRWAY_KV_CACHE_GIB": "1"}
    stack = Stack(servers.database_url, servers.redis_url, env_overrides=env)
    settings = Settings(database_url=servers.database_url)
    try:
        stack.start_api()
        stack.start_dispatcher()
        for i in range(args.workers):
            stack.start_worker(f"hop-{i}", engine=args.engine, timeout_s=900)
        wait_until(lambda: httpx.get(stack.base_url + "/readyz").status_code == 200, 60,
                   "ready", stack)
        key = capacity_tenant(stack.base_url, settings)
        engine = (f"sim engine, FAIRWAY_SIM_SPEED={args.sim_speed}" if args.engine == "sim"
                  else f"vLLM engine ({MODEL})")
        print(f"stack: 1 API, 1 dispatcher, {args.workers} workers x {args.slots} slots, "
              f"{engine}; streamed chat, max_tokens {args.max_tokens}; tracing "
              f"{'off' if args.no_tracing else 'on (files)'}")
        phases = [(Phase("idle"), args.idle, 1, args.idle_gap_ms / 1000)]
        if args.load:
            phases.append((Phase(f"load c={args.concurrency}"), args.load, args.concurrency,
                           0.0))
        for phase, total, concurrency, gap_s in phases:
            asyncio.run(run_phase(stack.base_url, key, phase, total, concurrency,
                                  args.max_tokens, gap_s))
            time.sleep(0.3)
        if args.no_tracing:
            for p, *_ in phases:
                print(f"{p.name}: client TTFT p50 {pct(p.client_ttft_ms, 50):.2f} ms, p99 "
                      f"{pct(p.client_ttft_ms, 99):.2f} ms ({len(p.client_ttft_ms)} requests, "
                      f"{p.failed} failed)")
            print(express_line(servers.database_url))
            return
        time.sleep(2.0)  # the processes export every 0.5 s
        results = [(p, *phase_hops(spans_dir, p)) for p, *_ in phases]
        print_table(results)
        print(express_line(servers.database_url))
        if args.keep:
            raw = data_dir / "hops.json"
            raw.write_text(json.dumps({p.name: t for p, t, _ in results}))
            print(f"\nper-trace hops: {raw}; spans: {spans_dir}")
    finally:
        stack.stop()
        servers.stop()
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
