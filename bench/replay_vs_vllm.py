"""`fairway bench replay` on the real engine, Fairway against bare vLLM (FCFS and priority),
alternating, with medians over rounds.

Run from the repository root (Postgres on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 up, the
vLLM engine installed):

    OMP_NUM_THREADS=2 .venv/bin/python bench/replay_vs_vllm.py \
        --trace $FAIRWAY_TRACE_DIR/azure_llm_2023_conv.csv --window 0,30 --rate-scale 0.3 \
        --repeat 2

Each round starts each system fresh, one at a time (never two engines at once): Fairway as
separate processes (API, dispatcher with --policy, one Celery worker hosting vLLM) on a
throwaway database and Redis db, then bare vLLM's OpenAI server with the same engine settings,
`--scheduling-policy fcfs` and `priority`. The order rotates each round to cancel drift on a
shared machine. The plan (trace window, rate scale, caps, mix) is the same for all: that of
`fairway bench replay`, whose modules do the sending and the arithmetic.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from redis import Redis  # noqa: E402

from bench.harness import START_TIMEOUT_S, raise_interrupt  # noqa: E402
from service.cli.replay.cli import TARGETS, plan_targets, read_mix, tenant_keys  # noqa: E402
from service.cli.replay.load import Outcomes, Target, replay, warm_up  # noqa: E402
from service.cli.replay.plan import Plan, build_plan  # noqa: E402
from service.cli.replay.report import batch_rows, markdown, realtime_rows  # noqa: E402
from service.cli.replay.vllm_baseline import bare_vllm  # noqa: E402
from service.cli.target import AdminClient  # noqa: E402
from service.store.settings import DEV_ADMIN_TOKEN, EngineSettings  # noqa: E402
from tests.support.services import (  # noqa: E402
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack  # noqa: E402

SERVED = "SmolLM2-135M-Instruct"
ENGINE = EngineSettings(max_num_seqs=64, max_model_len=2048, kv_cache_gib=2)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=os.environ.get("FAIRWAY_TRACE"), required=
                   not os.environ.get("FAIRWAY_TRACE"))
    p.add_argument("--window", default="0,30")
    p.add_argument("--rate-scale", type=float, default=0.3)
    p.add_argument("--max-prompt", type=int, default=256)
    p.add_argument("--max-output", type=int, default=64)
    p.add_argument("--mix", default=None, help="as `fairway bench replay --mix`")
    p.add_argument("--batch-every", type=float, default=30.0)
    p.add_argument("--drain", type=float, default=90.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--policy", default="fairway", choices=["fairway", "priority", "fcfs"],
                   help="Fairway's dispatcher policy")
    p.add_argument("--out", type=Path, default=None, help="raw figures JSON")
    return p.parse_args()


def make_plan(opts: argparse.Namespace) -> Plan:
    from scheduler.sim.trace import load_trace

    lo, hi = (float(x) for x in opts.window.split(","))
    return build_plan(load_trace(opts.trace), read_mix(opts.mix), window=(lo, hi),
                      rate_scale=opts.rate_scale, max_prompt=opts.max_prompt,
                      max_output=opts.max_output, batch_every_s=opts.batch_every)


def run_fairway(plan: Plan, opts: argparse.Namespace, model_dir: Path, db: str, redis: str,
                log_dir: Path) -> tuple[Outcomes, dict[str, float]]:
    Redis.from_url(redis).flushdb()
    env = {"FAIRWAY_KV_CACHE_GIB": str(ENGINE.kv_cache_gib),
           "FAIRWAY_MAX_NUM_SEQS": str(ENGINE.max_num_seqs),
           "FAIRWAY_MAX_MODEL_LEN": str(ENGINE.max_model_len),
           "FAIRWAY_SERVED_MODEL_NAME": SERVED, "FAIRWAY_MODEL_PATH": str(model_dir),
           "FAIRWAY_FILES_DIR": str(log_dir / "files"),
           "VLLM_CPU_KVCACHE_SPACE": str(int(ENGINE.kv_cache_gib)),
           "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(db, redis, log_dir=log_dir, env_overrides=env)
    try:
        stack.start_api()
        stack.start_dispatcher(policy=opts.policy)
        stack.start_worker("replay-1", engine="vllm", timeout_s=START_TIMEOUT_S)
        args = argparse.Namespace(base_url=stack.base_url, admin_token=DEV_ADMIN_TOKEN,
                                  data_dir=None, api_key=None)
        admin = AdminClient(args)
        target = Target("fairway", stack.base_url, SERVED, tenant_keys(admin, plan))
        slo = plan_targets(admin)
        warm_up(target)
        since = dt.datetime.now(dt.UTC)
        out = asyncio.run(replay(plan, target, drain_s=opts.drain))
        print(f"fairway timeline (medians, s): {fairway_timeline(db, since)}", flush=True)
        return out, slo
    finally:
        stack.stop()
        Redis.from_url(redis).flushdb()


TIMELINE_SQL = """
SELECT batch_id IS NULL AS realtime, count(*) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM assigned_at - created_at))
         AS dispatch_s,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - assigned_at))
         AS deliver_s,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY
         extract(epoch FROM first_token_at - started_at)) AS engine_first_s,
       sum(preemptions) AS preemptions
  FROM jobs WHERE created_at >= %s GROUP BY 1 ORDER BY 1 DESC
"""


def fairway_timeline(db: str, since: dt.datetime) -> list[dict[str, Any]]:
    """Where Fairway's time went, from its jobs table: medians of created -> assigned
    (dispatcher), assigned -> started (Celery delivery), started -> first token (engine
    queue + prefill), realtime and batch lines apart, of the jobs made since ``since``."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(TIMELINE_SQL, (since,))
        rows = [dict(r) for r in cur.fetchall()]
    return [{k: (float(v) if v is not None and k != "realtime" else v) for k, v in r.items()}
            for r in rows]


def run_vllm(name: str, plan: Plan, opts: argparse.Namespace, model_dir: Path,
             log: Path) -> Outcomes:
    priority = name == "vllm-priority"
    with bare_vllm(model_dir, SERVED, "priority" if priority else "fcfs", log, ENGINE) as base:
        target = Target(name, base, SERVED, fairway=False, priority=priority)
        warm_up(target)
        return asyncio.run(replay(plan, target, drain_s=opts.drain))


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per target, each realtime group's and batch tenant's figures, median over rounds."""
    out: dict[str, Any] = {}
    for target in rounds[0]:
        rt: dict[str, list[dict[str, Any]]] = {}
        bt: dict[str, list[dict[str, Any]]] = {}
        for r in rounds:
            for row in r[target]["realtime"]:
                rt.setdefault(row["group"], []).append(row)
            for row in r[target]["batch"]:
                bt.setdefault(row["tenant"], []).append(row)
        out[target] = {"realtime": {g: _med(rows) for g, rows in rt.items()},
                       "batch": {t: _med(rows) for t, rows in bt.items()}}
    return out


def _med(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in rows[0].items() if isinstance(v, int | float)]
    return {k: statistics.median(row[k] for row in rows) for k in keys}


def print_medians(med: dict[str, Any], n: int) -> None:
    print(f"\n## medians over {n} round(s)\n")
    print("| group | target | sent | ok | refused | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
          "TPOT p99 ms | attainment | goodput req/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    groups = list(dict.fromkeys(g for t in med.values() for g in t["realtime"]))
    for g in groups:
        for target, figs in med.items():
            r = figs["realtime"].get(g)
            if r is None:
                continue
            print(f"| {g} | {target} | {r['sent']:g} | {r['ok']:g} | {r['refused']:g} | "
                  f"{r['ttft_p50'] * 1000:.0f} | {r['ttft_p99'] * 1000:.0f} | "
                  f"{r['tpot_p50'] * 1000:.0f} | {r['tpot_p99'] * 1000:.0f} | "
                  f"{r['attainment'] * 100:.1f}% | {r['goodput']:.3f} |")
    print("\n| batch tenant | target | files done | lines done | output tok/s | "
          "file completion p50 s |\n|---|---|---|---|---|---|")
    for target, figs in med.items():
        for t, b in figs["batch"].items():
            print(f"| {t} | {target} | {b['files_done']:.0f}/{b['files']:.0f} | "
                  f"{b['lines_done']:.0f}/{b['lines']:.0f} | {b['tokens_per_s']:.1f} | "
                  f"{b['completion_p50_s']:.1f} |")


def main() -> int:
    opts = parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    from worker.model_prep import ensure_default_model

    model_dir = ensure_default_model()
    plan = make_plan(opts)
    targets = [t.strip() for t in opts.targets.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fairway-replay-bench-"))
    print(f"{len(plan.realtime)} realtime requests, {len(plan.batches)} batch files "
          f"({sum(len(b.lines) for b in plan.batches)} lines) over {plan.duration_s:.0f} s; "
          f"logs in {work}", flush=True)
    db = create_database("fairway_replay")
    redis = claim_redis_db()
    slo = plan_targets(None)
    rounds: list[dict[str, Any]] = []
    try:
        for n in range(opts.repeat):
            order = targets[n % len(targets):] + targets[:n % len(targets)]
            done: dict[str, Any] = {}
            results = []
            for name in order:
                print(f"\n=== round {n + 1}: {name} ===", flush=True)
                if name == "fairway":
                    out, slo = run_fairway(plan, opts, model_dir, db, redis,
                                           work / f"fairway-{n}")
                else:
                    out = run_vllm(name, plan, opts, model_dir, work / f"{name}-{n}.log")
                load = os.getloadavg()[0]
                print(f"{name}: machine load average (1 min) at the end {load:.1f}", flush=True)
                results.append((name, out))
                done[name] = {"realtime": [r.__dict__ for r in realtime_rows(out, slo)],
                              "batch": [b.__dict__ for b in batch_rows(out)],
                              "wall_s": out.wall_s, "loadavg": load}
            rounds.append({t: done[t] for t in targets})
            print(markdown(sorted(results, key=lambda r: targets.index(r[0])), slo),
                  flush=True)
            if opts.out:
                opts.out.write_text(json.dumps(rounds, indent=1))
        print_medians(medians(rounds), len(rounds))
    finally:
        drop_database(db)
        release_redis_db(redis)
    return 0


if __name__ == "__main__":
    sys.exit(main())
