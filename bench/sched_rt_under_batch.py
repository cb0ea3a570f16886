"""Realtime under a batch flood: realtime p99 TTFT against realtime alone (target <= 1.1x),
and batch throughput as a fraction of the capacity realtime leaves (target >= 90%), for
Fairway, Fairway without the engine's realtime guard (``fairway-noguard``), Fairway with
realtime placed least-loaded instead of by the engines' step clocks (``fairway-blind``),
Fairway with the realtime lane (``--lane JSON``: FairwayConfig overrides), FCFS and
"vLLM priority" (realtime first, but waiting never preempts running batch).

"Capacity realtime leaves" is printed two ways (docs/scheduler.md, "Realtime lane"):

- ``of left (tok)``: batch-alone output tok/s minus realtime-alone output tok/s, i.e. a
  realtime token costs what a batch token costs (realtime co-batched with batch);
- ``of left (busy)``: batch-alone output tok/s times (1 - realtime-alone busy fraction), i.e.
  realtime keeps the engine time it needs when it runs alone (the price of alone latency).

A p99 over a few thousand realtime jobs rests on its top few dozen, so one traffic draw is
noisy (+-0.05 in the ratio between seeds): ``--seeds N`` runs N draws (the scenario's seed and
the N-1 after it) and prints each, then the medians.

    python bench/sched_rt_under_batch.py [--scenario FILE] [--seeds N] [--variants a,b]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from typing import Any

from sched_common import SCENARIOS, ratio

from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.sim.traffic import generate
from scheduler.types import JobClass

VARIANTS = ["fairway", "fairway-noguard", "fairway-blind", "fairway-unlocked", "fairway+lane",
            "fcfs", "vllm-priority"]
LANE = '{"rt_lane": true, "lane_min_workers": 1}'
HEADER = (f"{'policy':<16}{'seed':>5}{'rt p50':>8}{'rt p99':>8}{'p99/alone':>11}{'rt slo%':>9}"
          f"{'rt rej':>8}{'batch tok/s':>13}{'left(tok)':>11}{'left(busy)':>12}{'preempt':>9}")


def run_seed(scenario: Scenario, variants: list[str], lane: str) -> list[dict[str, Any]]:
    jobs = generate(
        scenario.traffic, scenario.tenants, scenario.duration_s, scenario.seed, scenario.model
    )
    rt_jobs = [j for j in jobs if j.job_class is JobClass.REALTIME]
    batch_jobs = [j for j in jobs if j.job_class is JobClass.BATCH]
    slo = scenario.default_ttft_slo_s
    alone = summarize(run_variant(scenario, "fairway", rt_jobs), slo)
    rt_alone_p99 = alone["class"]["realtime"]["ttft_p99"]
    # Batch capacity on plain engines: the guard's cap would lower the baseline (and flatter
    # the ratio) for its first hold, before it sees that no realtime comes.
    flood = summarize(run_variant(scenario, "fairway-noguard", batch_jobs), slo)
    capacity = flood["class"]["batch"]["out_tok_s"]
    left = capacity - alone["class"]["realtime"]["out_tok_s"]  # realtime's share, in tokens
    left_busy = capacity * (1 - alone["busy_fraction"])
    print(
        f"seed {scenario.seed}: {len(rt_jobs)} realtime, {len(batch_jobs)} batch jobs; realtime"
        f" alone TTFT p50 {alone['class']['realtime']['ttft_p50']:.3f} s, p99"
        f" {rt_alone_p99:.3f} s, busy {100 * alone['busy_fraction']:.1f}%; batch alone"
        f" {capacity:.1f} out tok/s, left {left:.1f} (tok) / {left_busy:.1f} (busy)"
    )
    rows = []
    for variant in variants:
        s = copy.deepcopy(scenario)
        engine = variant.removesuffix("+lane")
        if variant.endswith("+lane"):
            s.fairway = {**s.fairway, **json.loads(lane)}
        if variant == "fairway-blind":
            s.fairway, engine = {**s.fairway, "rt_earliest_start": False}, "fairway"
        if variant == "fairway-unlocked":
            s.fairway_engine, engine = {**s.fairway_engine, "phase_period_s": 0.0}, "fairway"
        r = summarize(run_variant(s, engine, jobs), slo)
        rt, batch = r["class"]["realtime"], r["class"]["batch"]
        rows.append({
            "variant": variant, "seed": scenario.seed, "p50": rt["ttft_p50"],
            "p99": rt["ttft_p99"], "vs_alone": ratio(rt["ttft_p99"], rt_alone_p99),
            "slo": rt["slo_attainment"], "rejected": rt["rejected"],
            "batch": batch["out_tok_s"], "left": ratio(batch["out_tok_s"], left),
            "left_busy": ratio(batch["out_tok_s"], left_busy), "preempt": r["preemptions"],
        })
    return rows


def print_row(row: dict[str, Any], seed: str) -> None:
    print(
        f"{row['variant']:<16}{seed:>5}{row['p50']:>8.3f}{row['p99']:>8.3f}"
        f"{row['vs_alone']:>10.3f}x{100 * row['slo']:>8.1f}%{row['rejected']:>8}"
        f"{row['batch']:>13.1f}{100 * row['left']:>10.1f}%{100 * row['left_busy']:>11.1f}%"
        f"{row['preempt']:>9}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default=str(SCENARIOS / "sched_rt_under_batch.json"))
    parser.add_argument("--duration", type=float)
    parser.add_argument("--seeds", type=int, default=1, help="traffic draws (medians printed)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--profile", help="override every worker group's engine profile")
    parser.add_argument("--token-budget", type=int, help="override the per-step token budget")
    parser.add_argument("--lane", default=LANE, help="FairwayConfig overrides of fairway+lane")
    args = parser.parse_args()
    scenario = Scenario.load(args.scenario)
    if args.duration:
        scenario.duration_s = args.duration
    if args.profile:
        scenario.workers = [WorkerGroup(g.count, args.profile, g.models) for g in scenario.workers]
    if args.token_budget:
        for g in scenario.workers:
            g.overrides["token_budget"] = args.token_budget
    variants = [v for v in args.variants.split(",") if v]
    print(
        f"scenario {scenario.name}: {sum(g.count for g in scenario.workers)} x "
        f"{scenario.workers[0].profile}, {scenario.duration_s:.0f} s; fairway+lane: {args.lane}"
    )
    rows: list[dict[str, Any]] = []
    first_seed = scenario.seed
    for k in range(args.seeds):
        scenario.seed = first_seed + k
        rows += run_seed(scenario, variants, args.lane)
    print()
    print(HEADER)
    for row in rows:
        print_row(row, str(row["seed"]))
    if args.seeds > 1:
        print("\nmedians over the seeds:")
        for variant in variants:
            mine = [r for r in rows if r["variant"] == variant]
            median = {k: statistics.median(r[k] for r in mine) for k in mine[0]
                      if k not in ("variant", "seed")}
            print_row({"variant": variant, **median}, "med")
    print("\ntargets: p99/alone <= 1.10x, batch >= 90% of the capacity realtime leaves")


if __name__ == "__main__":
    main()
