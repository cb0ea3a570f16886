"""Overload at the door: realtime arrivals at 4x what the pool sustains, with admission at the
door (service/api/slo_gate.py) on, and off for comparison.

    python bench/overload.py [--factor 4] [--seconds 60] [--workers 2] [--slots 4]
                             [--admission-mode queue|shed] [--max-queue-wait-ms 30000]
                             [--burst N]

A private stack (embedded Postgres and Redis, simulated engines with few slots, so that the
engines, not the API and the load generator on a small host, are what saturates) serves two
tenants: premium (500 ms TTFT target) and standard (1 s), both plans set to
``--admission-mode`` (queue, as the built-in plans are, or shed by the TTFT target). First the
sustainable rate is measured: a saturating burst with admission off, completions per second.
Then Poisson arrivals at ``factor`` times that rate, streamed, half from each tenant, once
with admission on and once off. Printed per
run: accepted and refused, accepted TTFT p50/p99 and p99 / target per plan, accepted
attainment, refusals that would have met their target, refusal latency p50/p99, accepted
requests that did not finish (lost), and the door's predicted TTFT against what came
(bench/overload_report.py). ``--burst N`` sends N streams at once instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness import pct  # noqa: E402
from overload_lean import lean_one  # noqa: E402
from overload_report import honesty, prediction_error  # noqa: E402

from service.cli.bootstrap import create_tenant_with_key  # noqa: E402
from service.cli.embedded import EmbeddedServers  # noqa: E402
from service.store.db import sync_session  # noqa: E402
from service.store.migrate import upgrade  # noqa: E402
from service.store.settings import Settings  # noqa: E402
from service.store.telemetry.gc_pauses import freeze_startup_heap  # noqa: E402
from tests.support.stack import Stack, wait_until  # noqa: E402

MODEL = "sim-model"
TARGETS = {"premium": 0.5, "standard": 1.0}
BODY = {"model": MODEL, "stream": True, "max_tokens": 48, "temperature": 0,
        "messages": [{"role": "user", "content": "overload " * 20}]}


@dataclass
class Outcome:
    plan: str
    status: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0  # to the response's status line
    server_ms: int | None = None  # the API's own time to its response (openai-processing-ms)
    finished: bool = False  # a final chunk (finish_reason) and [DONE]
    error_code: str | None = None  # an error event in the stream, or the refusal's code
    sent_at: float = 0.0  # when sent: time.monotonic(), then seconds into the run (drive)
    job_hex: str | None = None  # the job's id, from the stream's chunk id (chatcmpl-<hex>)


async def one(client: httpx.AsyncClient, base: str, key: str, plan: str) -> Outcome:
    out = Outcome(plan, sent_at=time.monotonic())
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", base + "/v1/chat/completions", json=BODY,
                                 headers={"authorization": f"Bearer {key}"}) as resp:
            out.status, out.latency_s = resp.status_code, time.perf_counter() - t0
            processing = resp.headers.get("openai-processing-ms")
            out.server_ms = int(processing) if processing is not None else None
            if resp.status_code != 200:
                out.error_code = json.loads(await resp.aread())["error"].get("code")
                return out
            final = False
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    out.finished = final
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                if out.ttft_s is not None and '"finish_reason":null' in line:
                    continue  # a token: this client's CPU goes to timing the service, not parsing
                event = json.loads(line[6:])
                if out.job_hex is None and str(event.get("id", "")).startswith("chatcmpl-"):
                    out.job_hex = event["id"][len("chatcmpl-"):]
                if "error" in event:
                    out.error_code = event["error"].get("code") or "error"
                    continue
                choice = (event.get("choices") or [{}])[0]
                if out.ttft_s is None and choice.get("delta", {}).get("content"):
                    out.ttft_s = time.perf_counter() - t0
                final = final or bool(choice.get("finish_reason"))
    except httpx.HTTPError:  # counted as "other"; an accepted stream cut off counts as lost
        out.status = out.status or -1
    return out


async def burst(bases: list[str], keys: dict[str, str], n: int, warm: bool = False,
                lean: bool = False) -> list[Outcome]:
    """``n`` streams sent at once, alternating plans and API replicas. ``warm``: each tenant
    sends two requests first, each tenant's at once (a tenant already in use, its key and
    policy cached in the API: a tenant's first policy read is not cached, the second is),
    else the burst is each tenant's first contact."""
    plans = list(keys)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        for _ in range(2 if warm else 0):
            await asyncio.gather(*(one(client, base, keys[plan], plan)
                                   for plan in plans for base in bases))
        start = time.monotonic()
        watch = asyncio.create_task(watch_lag(start + 5.0))
        if lean:  # every request leaves at once: no client work per request before it
            outs = list(await asyncio.gather(*(
                lean_one(bases[i % len(bases)], keys[plans[i % len(plans)]], BODY,
                         Outcome(plans[i % len(plans)], sent_at=time.monotonic()))
                for i in range(n))))
        else:
            outs = list(await asyncio.gather(*(
                one(client, bases[i % len(bases)], keys[plans[i % len(plans)]],
                    plans[i % len(plans)]) for i in range(n))))
        await watch
    for out in outs:
        out.sent_at -= start
    return outs


async def drive(bases: list[str], keys: dict[str, str], rate: float, seconds: float,
                seed: int = 7) -> list[Outcome]:
    """Poisson arrivals, each to the next API replica in turn (a round-robin balancer)."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        tasks, t = [], 0.0
        start = time.monotonic()
        watch = asyncio.create_task(watch_lag(start + seconds))
        while t < seconds:
            t += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, start + t - time.monotonic()))
            plan = rng.choice(list(keys))
            base = bases[len(tasks) % len(bases)]
            tasks.append(asyncio.create_task(one(client, base, keys[plan], plan)))
        outs = list(await asyncio.gather(*tasks))
        await watch
        for out in outs:
            out.sent_at -= start
        return outs


CLIENT_LAG_MS: list[float] = []  # the load generator's own event-loop lag, last drive


async def watch_lag(until: float, tick_s: float = 0.01) -> None:
    """How late this client's event loop wakes: a refusal's latency measured here includes
    it (the load generator shares the box's 2 cores with the service)."""
    CLIENT_LAG_MS.clear()
    while time.monotonic() < until:
        before = time.monotonic()
        await asyncio.sleep(tick_s)
        CLIENT_LAG_MS.append((time.monotonic() - before - tick_s) * 1000)


async def capacity(base: str, key: str, burst: int) -> float:
    """Completions per second of a saturating burst (admission off)."""
    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=2000)) as c:
        t0 = time.monotonic()
        outs = await asyncio.gather(*(one(c, base, key, "capacity") for _ in range(burst)))
    done = sum(o.finished and o.error_code is None for o in outs)
    if done < burst:
        seen = Counter((o.status, o.error_code, o.finished) for o in outs)
        raise RuntimeError(f"only {done} of {burst} capacity requests finished: {dict(seen)}")
    return done / (time.monotonic() - t0)


def capacity_tenant(base: str, settings: Settings) -> str:
    """A tenant whose plan has no latency target to speak of and no quota: the capacity
    burst must be served whole, however long it queues."""
    admin = {"authorization": f"Bearer {settings.admin_token}"}
    httpx.put(base + "/admin/tiers/bench-capacity", headers=admin, timeout=30, json={
        "weight": 1.0, "allowed_service_tiers": ["auto", "default"], "ttft_slo_ms": 3_600_000,
        "tpot_slo_ms": 60_000,
        "quotas": dict.fromkeys(("requests_per_minute", "tokens_per_minute",
                                 "concurrent_requests", "batch_enqueued_tokens",
                                 "monthly_tokens"), "unlimited")}).raise_for_status()
    return create_tenant_with_key(settings, f"capacity-{uuid.uuid4().hex[:6]}",
                                  plan="bench-capacity")[1]


def report(name: str, outs: list[Outcome], door_off: list[Outcome] | None = None) -> None:
    accepted = [o for o in outs if o.status == 200]
    refused = [o for o in outs if o.status == 429]
    later = [o for o in accepted if o.error_code is not None]
    lost = [o for o in accepted if not o.finished and o.error_code is None]
    codes = Counter(o.error_code for o in refused + later)
    print(f"\n{name}: {len(outs)} sent, {len(accepted)} accepted, {len(refused)} refused "
          f"at the door (429), {len(later)} accepted then refused or failed, "
          f"{len(outs) - len(accepted) - len(refused)} other, {len(lost)} lost; codes "
          f"{dict(codes)}")
    for plan, target in TARGETS.items():
        ttfts = [o.ttft_s for o in accepted if o.plan == plan and o.ttft_s is not None]
        if ttfts:
            p99 = pct(ttfts, 99)
            print(f"  {plan:<9} target {target:.2f} s: TTFT p50 {pct(ttfts, 50):.3f} s, "
                  f"p99 {p99:.3f} s = {p99 / target:.2f}x target ({len(ttfts)} accepted)")
    honesty(outs, TARGETS, door_off)
    if refused:
        lat = [o.latency_s * 1000 for o in refused]
        print(f"  refusal latency p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms "
              f"(at the client, whose own event loop runs every stream on the same box)")
        if CLIENT_LAG_MS:
            print(f"  the client's own event-loop lag p50 {pct(CLIENT_LAG_MS, 50):.1f} ms, "
                  f"p99 {pct(CLIENT_LAG_MS, 99):.1f} ms")
        server = [float(o.server_ms) for o in refused if o.server_ms is not None]
        if server:
            print(f"  refusal in the API (openai-processing-ms) p50 {pct(server, 50):.0f} ms, "
                  f"p99 {pct(server, 99):.0f} ms")
        # When the slowest came tells a stall (all at one moment) from steady queueing.
        slow = sorted(refused, key=lambda o: o.latency_s, reverse=True)[:8]
        print("  slowest refusals (sent at +s: client / API ms): " + ", ".join(
            f"+{o.sent_at:.1f}: {o.latency_s * 1000:.0f} / {o.server_ms}" for o in slow))


def explain(database_url: str, tenants: dict[str, uuid.UUID], since: float) -> None:
    """Where accepted realtime jobs' first tokens waited, per plan, from the jobs table:
    the dispatcher's queue (created -> assigned), the hand-off (assigned -> started) and the
    engine (started -> first token); p50/p99 in ms, and the slowest job's split."""
    from sqlalchemy import text

    from service.store.db import sync_session
    query = text("""SELECT extract(epoch FROM assigned_at - created_at),
                           extract(epoch FROM started_at - assigned_at),
                           extract(epoch FROM first_token_at - started_at),
                           extract(epoch FROM first_token_at - created_at)
                    FROM jobs WHERE tenant_id = :t AND kind = 'realtime'
                      AND created_at >= to_timestamp(:since) AND first_token_at IS NOT NULL""")
    overtaken = text("""SELECT extract(epoch FROM p.assigned_at - p.created_at),
                (SELECT count(*) FROM jobs o WHERE o.tenant_id <> p.tenant_id
                   AND o.kind = 'realtime' AND o.created_at > p.created_at
                   AND o.assigned_at < p.assigned_at),
                (SELECT count(*) FROM jobs o WHERE o.tenant_id = p.tenant_id
                   AND o.created_at > p.created_at AND o.assigned_at < p.assigned_at),
                (SELECT count(*) FROM jobs o WHERE o.assigned_at > p.created_at
                   AND o.assigned_at < p.assigned_at),
                (SELECT count(*) FROM jobs o WHERE o.finished_at > p.created_at
                   AND o.finished_at < p.assigned_at),
                (SELECT count(*) FROM jobs o WHERE o.assigned_at <= p.created_at
                   AND (o.finished_at IS NULL OR o.finished_at > p.created_at))
                FROM jobs p WHERE p.tenant_id = :t AND p.kind = 'realtime'
                  AND p.created_at >= to_timestamp(:since) AND p.assigned_at IS NOT NULL
                ORDER BY p.assigned_at - p.created_at DESC LIMIT 3""")
    print("\nwhere first tokens waited (admission on; ms: queue / hand-off / engine):")
    with sync_session(database_url) as session:
        for plan, tenant_id in tenants.items():
            rows = [tuple(float(v or 0) * 1000 for v in r)
                    for r in session.execute(query, {"t": tenant_id, "since": since})]
            if not rows:
                continue
            parts = [" / ".join(f"{pct([r[i] for r in rows], q):.0f}" for i in range(3))
                     for q in (50, 99)]
            slow = max(rows, key=lambda r: r[3])
            print(f"  {plan:<9} p50 {parts[0]}; p99 {parts[1]}; slowest {slow[3]:.0f} ms = "
                  f"{slow[0]:.0f} / {slow[1]:.0f} / {slow[2]:.0f}")
        # A stall shows as a gap in which nothing was assigned and nothing finished.
        for column in ("assigned_at", "finished_at"):
            gaps = session.execute(text(f"""SELECT extract(epoch FROM gap), extract(epoch FROM at)
                FROM (SELECT {column} - lag({column}) OVER (ORDER BY {column}) AS gap,
                             {column} AS at FROM jobs
                      WHERE {column} >= to_timestamp(:since)) g
                WHERE gap IS NOT NULL ORDER BY gap DESC LIMIT 3"""), {"since": since}).all()
            print(f"  longest gaps between {column}: " + ", ".join(
                f"{float(g) * 1000:.0f} ms (ending at +{float(at) - since:.1f} s)"
                for g, at in gaps))
        # Were the slowest overtaken (created later, assigned sooner), or was no slot free?
        for plan, tenant_id in tenants.items():
            for row in session.execute(overtaken, {"t": tenant_id, "since": since}):
                print(f"  slow {plan}: queued {row[0] * 1000:.0f} ms, overtaken by "
                      f"{row[1]} later jobs of other tenants, {row[2]} of its own; "
                      f"meanwhile {row[3]} assigned, {row[4]} finished; {row[5]} running "
                      f"when it came")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--factor", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sim-speed", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=4, help="engine slots per worker")
    parser.add_argument("--rate", type=float, default=None,
                        help="the sustainable rate, requests/s: skip measuring it (to compare "
                             "runs at the same arrival rate)")
    parser.add_argument("--api-replicas", type=int, default=1,
                        help="API processes in the admission-on run, each on its own port, "
                             "requests spread round-robin as a load balancer would")
    parser.add_argument("--api-workers", type=int, default=1,
                        help="uvicorn worker processes behind the API's one port "
                             "(`fairway api --workers`), the kernel spreading connections")
    parser.add_argument("--dump", type=Path, default=None,
                        help="write every request's outcome of the admission-on run as JSON lines")
    parser.add_argument("--admission-mode", choices=["queue", "shed"], default="queue",
                        help="the two plans' realtime admission (docs/tenancy.md): queue "
                             "within --max-queue-wait-ms, or shed by the TTFT target")
    parser.add_argument("--max-queue-wait-ms", type=int, default=30_000)
    parser.add_argument("--on-only", action="store_true",
                        help="skip the run with admission off (measure capacity only)")
    parser.add_argument("--burst", type=int, default=0,
                        help="instead of Poisson arrivals, send this many streams at once "
                             "(admission on only; no capacity run)")
    parser.add_argument("--client", choices=["httpx", "lean"], default="httpx",
                        help="with --burst: the load generator's client (lean: raw "
                             "connections, bench/overload_lean.py)")
    parser.add_argument("--warm", action="store_true",
                        help="with --burst: each tenant sends one request first")
    args = parser.parse_args()
    servers = EmbeddedServers(Path(tempfile.mkdtemp(prefix="fairway-overload-")))
    servers.start(need_db=True, need_redis=True)
    upgrade(servers.database_url)
    with sync_session(servers.database_url) as session:
        session.execute(text("UPDATE tiers SET admission_mode = :mode, max_queue_wait_ms = :wait "
                             "WHERE name = ANY(:names)"),
                        {"mode": args.admission_mode, "wait": args.max_queue_wait_ms,
                         "names": list(TARGETS)})
        session.commit()
    print(f"admission: {args.admission_mode}"
          + (f" within {args.max_queue_wait_ms} ms" if args.admission_mode == "queue" else ""))
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_MAX_NUM_SEQS": str(args.slots),
           "FAIRWAY_LOG_LEVEL": "WARNING", "FAIRWAY_METRICS_ENABLED": "false",
           "FAIRWAY_SIM_SPEED": str(args.sim_speed)}
    stack = Stack(servers.database_url, servers.redis_url, env_overrides=env)
    settings = Settings(database_url=servers.database_url)
    made = {plan: create_tenant_with_key(settings, f"{plan}-{uuid.uuid4().hex[:6]}",
                                         plan=plan) for plan in TARGETS}
    keys = {plan: key for plan, (_, key) in made.items()}
    try:
        stack.start_dispatcher()
        for i in range(args.workers):
            stack.start_worker(f"ov-{i}")
        runs: dict[str, list[Outcome]] = {}
        rate = args.rate or 0.0
        for admission in ("false", "true"):
            stack.env_overrides["FAIRWAY_SLO_ADMISSION"] = admission
            stack.start_api(args.api_workers)
            if args.burst:
                pass  # the same burst with the door off: how many the pool serves in time
            elif admission == "false" and args.rate:
                rate = args.rate
            elif admission == "false":
                rate = asyncio.run(capacity(stack.base_url, capacity_tenant(
                    stack.base_url, settings), burst=args.slots * args.workers * 6))
                print(f"sustainable rate: {rate:.2f} requests/s "
                      f"({args.workers} simulated workers x {args.slots} slots)")
            wait_until(lambda: httpx.get(stack.base_url + "/readyz").status_code == 200, 30,
                       "ready", stack)
            started = time.time()
            if admission == "false" and args.on_only:
                stack.kill("api")
                continue
            # The client's own full collections would stall every stream it times, as the
            # service's would: freeze what set-up made.
            freeze_startup_heap("bench")
            bases = [stack.base_url] + [stack.start_api_replica(f"api-{i}")
                                        for i in range(1, args.api_replicas)]
            runs[admission] = asyncio.run(
                burst(bases, keys, args.burst, args.warm, args.client == "lean") if args.burst
                else drive(bases, keys, args.factor * rate, args.seconds))
            for name in [n for n in stack.procs if n.startswith("api")]:
                stack.kill(name)
        if args.burst:
            print(f"\narrivals: {args.burst} streams at once, half premium, half standard"
                  + (", each tenant's key and policy warm" if args.warm else
                     ", each tenant's first contact"))
        else:
            print(f"\narrivals: Poisson at {args.factor:g} x {rate:.2f} = "
                  f"{args.factor * rate:.1f}/s for {args.seconds:g} s, half premium, half "
                  f"standard, streamed")
        if "false" in runs:
            report("admission off", runs["false"])
        report("admission on (default)", runs["true"], runs.get("false"))
        prediction_error(servers.database_url, runs["true"], TARGETS)
        if args.dump:
            args.dump.write_text("".join(json.dumps(asdict(o)) + "\n" for o in runs["true"]))
        explain(servers.database_url, {t: tid for t, (tid, _) in made.items()}, started)
    finally:
        stack.stop()
        servers.stop()


if __name__ == "__main__":
    main()
