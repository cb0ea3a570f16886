"""Autoscaling on a day of traffic, in the simulator: a fixed pool, Fairway's rule
(scheduler/autoscale.py) and queue depth alone (production-stack's KEDA rule: vLLM's
``num_requests_waiting`` per replica, scale to zero), on GPU-hours, realtime TTFT attainment
and batch deadline misses.

The day: an Azure LLM inference trace's hour (docs/traces.md) tiled over 24 hours, ``--peak``
copies of it at the afternoon peak and thinned along a cosine to ``--trough`` of that at
04:00; and a nightly batch backlog (``--batch-jobs`` requests of the trace's lengths, each
asking ``--batch-max-tokens``) arriving at ``--batch-at`` o'clock, due ``--batch-window``
hours later. Every rule runs the same jobs through the Fairway policy and engines
(scheduler.sim.autoscaler); a worker asked for holds its GPU from then and serves
``--start-delay`` seconds later.

    FAIRWAY_TRACE_DIR=... python bench/autoscale.py            # the table in docs/deploy.md
    python bench/autoscale.py --hours 4 --peak 1 --batch-jobs 2000   # a quick look
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.sim.autoscaler import AutoscaledSimulation, AutoscaleSettings
from scheduler.sim.jobs import SimJob
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.sim.trace import TraceRequest, load_trace
from scheduler.tiers import BATCH_TIER, DEFAULT_TIER
from scheduler.types import JobClass

HOUR = 3600.0
MODEL = "llama-8b"


def diurnal(t: float, trough: float) -> float:
    """The day's shape: 1 at 16:00, ``trough`` at 04:00."""
    hour = (t / HOUR) % 24.0
    return trough + (1.0 - trough) * (0.5 - 0.5 * math.cos(2 * math.pi * (hour - 4.0) / 24.0))


def day_jobs(requests: tuple[TraceRequest, ...], *, hours: float, peak: int, trough: float,
             ttft_s: float, batch_jobs: int, batch_at_h: float, batch_window_h: float,
             batch_max_tokens: int, seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    span = min(HOUR, requests[-1].at + 1e-3) if requests else HOUR
    hour = [r for r in requests if r.at < span]
    jobs: list[SimJob] = []
    for copy in range(peak):
        shift = copy * span / peak  # copies interleave, not stack
        for h in range(math.ceil(hours * HOUR / span)):
            for r in hour:
                at = h * span + (r.at + shift) % span
                if at >= hours * HOUR or rng.random() >= diurnal(at, trough):
                    continue
                out = max(1, min(r.output_tokens, 1024))
                jobs.append(SimJob(f"rt{len(jobs)}", "rt", JobClass.REALTIME, DEFAULT_TIER,
                                   MODEL, at, None, max(1, min(r.prompt_tokens, 8192)), out,
                                   out, ttft_slo_s=ttft_s))
    start = batch_at_h * HOUR
    for i in range(batch_jobs):
        r = rng.choice(hour)
        out = max(1, min(r.output_tokens, batch_max_tokens))
        at = start + i * 1e-3
        jobs.append(SimJob(f"b{i}", "batch", JobClass.BATCH, BATCH_TIER, MODEL, at,
                           at + batch_window_h * HOUR, max(1, min(r.prompt_tokens, 8192)),
                           batch_max_tokens, out))
    jobs.sort(key=lambda j: j.arrival)
    return jobs


def run(rule: str, jobs: list[SimJob], args: argparse.Namespace) -> dict[str, Any]:
    workers = args.fixed_workers if rule == "fixed" else args.max_workers
    scenario = Scenario(
        name=f"autoscale-{rule}", duration_s=args.hours * HOUR,
        workers=[WorkerGroup(workers, args.profile, (MODEL,))], traffic=[],
        tenants={"rt": 1.0, "batch": 1.0}, model=MODEL, policies=["fairway"],
        drain_s=args.drain_h * HOUR, bin_s=300.0, default_ttft_slo_s=args.ttft)
    min_workers = {"queue_depth": 0, "fairway-zero": 0}.get(rule, 1)
    settings = AutoscaleSettings(
        rule="fairway" if rule.startswith("fairway") else rule,
        start_delay_s=args.start_delay, min_workers=min_workers,
        initial_workers=min_workers, interval_s=args.interval, cooldown_s=args.cooldown,
        queue_threshold=args.queue_threshold, ttft_target_s=args.ttft,
        gpu_hours_until_s=args.hours * HOUR)
    sim = AutoscaledSimulation(scenario, "fairway", settings, jobs)
    started = time.perf_counter()
    result = sim.run()
    records = result.metrics.records.values()
    rt = [r for r in records if r.job.job_class is JobClass.REALTIME]
    met = sum(1 for r in rt if r.ttft is not None and r.ttft <= args.ttft)
    ttfts = sorted(r.ttft if r.ttft is not None else math.inf for r in rt)
    batch = [r for r in records if r.job.job_class is JobClass.BATCH]
    missed = sum(1 for r in batch if r.finished is None or r.job.deadline is None
                 or r.finished > r.job.deadline)
    peak_held = max((n for _, n, _, _ in sim.timeline), default=workers)
    hourly = [workers] * math.ceil(args.hours)
    for t, n, _, _ in sim.timeline:  # the workers held at each hour's last look
        if t < args.hours * HOUR:
            hourly[int(t // HOUR)] = n
    return {"rule": rule, "gpu_h": sim.gpu_s / HOUR, "attain": met / max(1, len(rt)),
            "p99": ttfts[int(0.99 * (len(ttfts) - 1))] if ttfts else math.nan,
            "missed": missed, "batch": len(batch), "rt": len(rt), "peak": peak_held,
            "wall": time.perf_counter() - started, "hourly": " ".join(map(str, hourly))}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--trace", default="$FAIRWAY_TRACE_DIR/azure_llm_2023_conv.csv")
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--peak", type=int, default=3, help="copies of the trace's hour at 16:00")
    p.add_argument("--trough", type=float, default=0.15, help="04:00 traffic over the peak")
    p.add_argument("--ttft", type=float, default=1.0, help="realtime TTFT target (s)")
    p.add_argument("--batch-jobs", type=int, default=40000)
    p.add_argument("--batch-at", type=float, default=1.0, help="hour the backlog arrives")
    p.add_argument("--batch-window", type=float, default=6.0, help="hours until it is due")
    p.add_argument("--batch-max-tokens", type=int, default=1024)
    p.add_argument("--start-delay", type=float, default=120.0, help="a worker's start (s)")
    p.add_argument("--max-workers", type=int, default=6)
    p.add_argument("--fixed-workers", type=int, default=4)
    p.add_argument("--interval", type=float, default=15.0)
    p.add_argument("--cooldown", type=float, default=900.0)
    p.add_argument("--queue-threshold", type=float, default=5.0)
    p.add_argument("--drain-h", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rules", default="fixed,fairway,queue_depth,fairway-zero")
    args = p.parse_args(argv)
    jobs = day_jobs(load_trace(args.trace), hours=args.hours, peak=args.peak,
                    trough=args.trough, ttft_s=args.ttft, batch_jobs=args.batch_jobs,
                    batch_at_h=args.batch_at, batch_window_h=args.batch_window,
                    batch_max_tokens=args.batch_max_tokens, seed=args.seed)
    print(f"{sum(j.job_class is JobClass.REALTIME for j in jobs)} realtime and "
          f"{args.batch_jobs} batch jobs over {args.hours:g} h", flush=True)
    print("| rule | GPU-hours | realtime TTFT <= target | TTFT p99 | batch deadline misses "
          "| most workers held | sim wall |")
    print("|---|---|---|---|---|---|---|")
    hourly = []
    for rule in args.rules.split(","):
        row = run(rule, jobs, args)
        print(f"| {rule} | {row['gpu_h']:.1f} | {100 * row['attain']:.2f}% | "
              f"{row['p99']:.2f} s | {row['missed']} of {row['batch']} | "
              f"{row['peak']} | {row['wall']:.0f} s |", flush=True)
        hourly.append(f"{rule}: {row['hourly']}")
    print("\nworkers held at each hour's end, from 00:00:")
    print("\n".join(hourly))


if __name__ == "__main__":
    main()
