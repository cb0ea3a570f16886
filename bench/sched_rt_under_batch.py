"""Realtime under a batch flood: realtime p99 TTFT against realtime alone (target <= 1.1x),
and batch throughput as a fraction of the capacity realtime leaves (target >= 90%), for
Fairway, Fairway without the engine's realtime guard (``fairway-noguard``), Fairway with the
realtime lane (``--lane JSON``: FairwayConfig overrides), FCFS and
"vLLM priority" (realtime first, but waiting never preempts running batch).

"Capacity realtime leaves" is printed two ways (docs/scheduler.md, "Realtime lane"):

- ``of left (tok)``: batch-alone output tok/s minus realtime-alone output tok/s, i.e. a
  realtime token costs what a batch token costs (realtime co-batched with batch);
- ``of left (busy)``: batch-alone output tok/s times (1 - realtime-alone busy fraction), i.e.
  realtime keeps the engine time it needs when it runs alone (the price of alone latency).

    python bench/sched_rt_under_batch.py [--scenario FILE] [--token-budget N] [--duration S]
"""

from __future__ import annotations

import argparse
import json

from sched_common import SCENARIOS, ratio

from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario, WorkerGroup
from scheduler.sim.traffic import generate
from scheduler.types import JobClass

VARIANTS = ["fairway", "fairway-noguard", "fairway+lane", "fcfs", "vllm-priority"]
LANE = '{"rt_lane": true, "lane_min_workers": 1}'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default=str(SCENARIOS / "sched_rt_under_batch.json"))
    parser.add_argument("--duration", type=float)
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
    jobs = generate(
        scenario.traffic, scenario.tenants, scenario.duration_s, scenario.seed, scenario.model
    )
    rt_jobs = [j for j in jobs if j.job_class is JobClass.REALTIME]
    batch_jobs = [j for j in jobs if j.job_class is JobClass.BATCH]
    slo = scenario.default_ttft_slo_s

    alone = summarize(run_variant(scenario, "fairway", rt_jobs), slo)
    rt_alone_p99 = alone["class"]["realtime"]["ttft_p99"]
    rt_busy = alone["busy_fraction"]
    # Batch capacity on plain engines: the guard's cap would lower the baseline (and flatter
    # the ratio) for its first hold, before it sees that no realtime comes.
    flood = summarize(run_variant(scenario, "fairway-noguard", batch_jobs), slo)
    batch_capacity = flood["class"]["batch"]["out_tok_s"]
    # Realtime's share of capacity, in output tokens: what it produced alone.
    left = batch_capacity - alone["class"]["realtime"]["out_tok_s"]
    left_busy = batch_capacity * (1 - rt_busy)
    print(
        f"scenario {scenario.name}: {len(rt_jobs)} realtime, {len(batch_jobs)} batch jobs, "
        f"{sum(g.count for g in scenario.workers)} x {scenario.workers[0].profile}, "
        f"{scenario.duration_s:.0f} s"
    )
    print(
        f"realtime alone: TTFT p50 {alone['class']['realtime']['ttft_p50']:.3f} s, "
        f"p99 {rt_alone_p99:.3f} s, busy {100 * rt_busy:.1f}%"
    )
    print(
        f"batch alone: {batch_capacity:.1f} out tok/s; capacity realtime leaves {left:.1f} tok/s"
        f" (tok) or {left_busy:.1f} tok/s (busy)"
    )
    print(f"fairway+lane: {args.lane}")
    print()
    print(
        f"{'policy':<14}{'rt p50':>8}{'rt p99':>8}{'p99/alone':>11}{'rt slo%':>9}"
        f"{'rt rej':>8}{'batch tok/s':>13}{'left(tok)':>11}{'left(busy)':>12}{'preempt':>9}"
    )
    base = dict(scenario.fairway)
    for variant in VARIANTS:
        scenario.fairway = {**base, **json.loads(args.lane)} if variant.endswith("+lane") else base
        s = summarize(run_variant(scenario, variant.removesuffix("+lane"), jobs), slo)
        rt, batch = s["class"]["realtime"], s["class"]["batch"]
        print(
            f"{variant:<14}{rt['ttft_p50']:>8.3f}{rt['ttft_p99']:>8.3f}"
            f"{ratio(rt['ttft_p99'], rt_alone_p99):>10.2f}x{100 * rt['slo_attainment']:>8.1f}%"
            f"{rt['rejected']:>8}{batch['out_tok_s']:>13.1f}"
            f"{100 * ratio(batch['out_tok_s'], left):>10.1f}%"
            f"{100 * ratio(batch['out_tok_s'], left_busy):>11.1f}%{s['preemptions']:>9}"
        )
    print("\ntargets: p99/alone <= 1.10x, batch >= 90% of the capacity realtime leaves")


if __name__ == "__main__":
    main()
