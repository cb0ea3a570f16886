"""Scale to zero on a day with a quiet model, in the simulator: a fixed pool of one worker,
Fairway's rule with one worker always (``minReplicas`` 1), Fairway's rule to zero (idle
``--idle`` seconds, then none; the first request wakes one and waits out its start in the
API's waiting room) and queue depth to zero (production-stack's KEDA rule).

The day: ``--bursts`` sessions of realtime traffic at seeded times between 08:00 and 22:00,
each ``--burst-minutes`` long at ``--rate`` requests a second (Poisson; prompts 200-2000
tokens, answers 50-400), and a small nightly batch (``--batch-jobs`` lines at 02:00, due
``--batch-window`` hours later). Synthetic and seeded: no trace needed.

Reported per rule: GPU-hours, realtime TTFT attainment, batch deadline misses, the realtime
requests that arrived with no live worker (cold) and how long the first request of each
wake waited for its first token.

    python bench/scale_to_zero.py            # the table in docs/deploy.md
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.cost_profiles import profile
from scheduler.sim.autoscaler import AutoscaledSimulation, AutoscaleSettings
from scheduler.sim.jobs import SimJob
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.tiers import BATCH_TIER, DEFAULT_TIER
from scheduler.types import JobClass

HOUR = 3600.0
MODEL = "quiet-8b"
# rule -> (autoscaler rule, min workers, fixed pool size)
RULES: dict[str, tuple[str, int]] = {
    "fixed-1": ("fixed", 1), "fairway-min1": ("fairway", 1), "fairway-zero": ("fairway", 0),
    "queue_depth-zero": ("queue_depth", 0)}


def quiet_day(*, bursts: int, burst_minutes: float, rate: float, ttft_s: float,
              batch_jobs: int, batch_at_h: float, batch_window_h: float,
              seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    jobs: list[SimJob] = []
    for start in sorted(rng.uniform(8 * HOUR, 22 * HOUR) for _ in range(bursts)):
        at = start
        while (at := at + rng.expovariate(rate)) < start + burst_minutes * 60:
            out = rng.randint(50, 400)
            jobs.append(SimJob(f"rt{len(jobs)}", "rt", JobClass.REALTIME, DEFAULT_TIER, MODEL,
                               at, None, rng.randint(200, 2000), out, out, ttft_slo_s=ttft_s))
    for i in range(batch_jobs):
        at = batch_at_h * HOUR + i * 1e-3
        out = rng.randint(100, 500)
        jobs.append(SimJob(f"b{i}", "batch", JobClass.BATCH, BATCH_TIER, MODEL, at,
                           at + batch_window_h * HOUR, rng.randint(200, 2000), 512, out))
    jobs.sort(key=lambda j: j.arrival)
    return jobs


def run(name: str, jobs: list[SimJob], args: argparse.Namespace) -> dict[str, Any]:
    rule, min_workers = RULES[name]
    workers = 1 if rule == "fixed" else args.max_workers
    scenario = Scenario(
        name=f"zero-{name}", duration_s=24 * HOUR,
        workers=[WorkerGroup(workers, args.profile, (MODEL,))], traffic=[],
        tenants={"rt": 1.0, "batch": 1.0}, model=MODEL, policies=["fairway"],
        drain_s=0.5 * HOUR, bin_s=300.0, default_ttft_slo_s=args.ttft)
    settings = AutoscaleSettings(
        rule=rule, start_delay_s=args.start_delay, min_workers=min_workers,
        initial_workers=min_workers, interval_s=15.0, cooldown_s=args.cooldown,
        ttft_target_s=args.ttft, gpu_hours_until_s=24 * HOUR,
        fairway={"idle_after_s": args.idle})
    sim = AutoscaledSimulation(scenario, "fairway", settings, jobs)
    result = sim.run()
    records = result.metrics.records
    rt = [r for r in records.values() if r.job.job_class is JobClass.REALTIME]
    met = sum(1 for r in rt if r.ttft is not None and r.ttft <= args.ttft)
    batch = [r for r in records.values() if r.job.job_class is JobClass.BATCH]
    missed = sum(1 for r in batch if r.finished is None or r.job.deadline is None
                 or r.finished > r.job.deadline)
    # The first cold arrival after a warm spell: the request that woke the model.
    firsts, last = [], -math.inf
    for job_id in sim.cold_arrivals:
        record = records[job_id]
        if record.job.arrival - last > sim.start_delay_s * 2:
            firsts.append(record.ttft if record.ttft is not None else math.inf)
        last = record.job.arrival
    return {"rule": name, "gpu_h": sim.gpu_s / HOUR, "attain": met / max(1, len(rt)),
            "missed": missed, "batch": len(batch), "rt": len(rt),
            "cold": len(sim.cold_arrivals), "wakes": len(firsts),
            "first_wait": statistics.median(firsts) if firsts else None,
            "first_max": max(firsts) if firsts else None}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--bursts", type=int, default=5)
    p.add_argument("--burst-minutes", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=0.2, help="requests a second in a burst")
    p.add_argument("--ttft", type=float, default=1.0, help="realtime TTFT target (s)")
    p.add_argument("--batch-jobs", type=int, default=2000)
    p.add_argument("--batch-at", type=float, default=2.0, help="hour the batch arrives")
    p.add_argument("--batch-window", type=float, default=6.0, help="hours until it is due")
    p.add_argument("--start-delay", type=float, default=None,
                   help="a worker's start (s); default: the profile's start_s")
    p.add_argument("--idle", type=float, default=900.0, help="fairway: idle before zero (s)")
    p.add_argument("--cooldown", type=float, default=300.0)
    p.add_argument("--max-workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rules", default=",".join(RULES))
    args = p.parse_args(argv)
    jobs = quiet_day(bursts=args.bursts, burst_minutes=args.burst_minutes, rate=args.rate,
                     ttft_s=args.ttft, batch_jobs=args.batch_jobs, batch_at_h=args.batch_at,
                     batch_window_h=args.batch_window, seed=args.seed)
    rt = sum(j.job_class is JobClass.REALTIME for j in jobs)
    start_delay = (args.start_delay if args.start_delay is not None
                   else profile(args.profile).start_s)
    print(f"{rt} realtime requests in {args.bursts} bursts and {args.batch_jobs} batch lines "
          f"over 24 h; worker start {start_delay:g} s")
    print("| rule | GPU-hours | realtime TTFT <= target | batch deadline misses "
          "| cold requests | wakes | first request's wait (median, max) |")
    print("|---|---|---|---|---|---|---|")
    for name in args.rules.split(","):
        r = run(name, jobs, args)
        wait = ("-" if r["first_wait"] is None
                else f"{r['first_wait']:.0f} s, {r['first_max']:.0f} s")
        print(f"| {name} | {r['gpu_h']:.1f} | {100 * r['attain']:.2f}% | "
              f"{r['missed']} of {r['batch']} | {r['cold']} of {r['rt']} | {r['wakes']} "
              f"| {wait} |", flush=True)


if __name__ == "__main__":
    main()
