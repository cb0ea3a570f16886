"""Fairness: three backlogged tenants weighted 1:2:4. Served weighted tokens should be within
5% of the weights, and the VTC gap (service charged at assignment, per weight) within 2x the
largest request cost, against FCFS and strict priority.

    python bench/sched_fairness.py [--scenario FILE] [--duration S]
"""

from __future__ import annotations

import argparse

from sched_common import SCENARIOS, ratio

from scheduler.sim.metrics import cumulative_service
from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.traffic import generate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default=str(SCENARIOS / "sched_fairness.json"))
    parser.add_argument("--duration", type=float)
    parser.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="shares are measured after this (all tenants backlogged by then)",
    )
    args = parser.parse_args()
    scenario = Scenario.load(args.scenario)
    if args.duration:
        scenario.duration_s = args.duration
    jobs = generate(
        scenario.traffic, scenario.tenants, scenario.duration_s, scenario.seed, scenario.model
    )
    tenants = sorted(scenario.tenants, key=lambda t: scenario.tenants[t])
    total_w = sum(scenario.tenants.values())
    print(
        f"scenario {scenario.name}: {len(jobs)} jobs, weights "
        + ":".join(f"{scenario.tenants[t]:g}" for t in tenants)
    )
    print(
        f"{'policy':<10}"
        + "".join(f"{'share ' + t:>12}" for t in tenants)
        + f"{'worst dev':>11}{'jain(w)':>9}{'vtc gap':>10}{'2x max':>9}{'gap/bound':>11}"
    )
    for variant in scenario.policies:
        result = run_variant(scenario, variant, jobs)
        s = summarize(result, scenario.default_ttft_slo_s)
        series = cumulative_service(result.metrics, result.end_s)
        first = int(args.warmup / scenario.bin_s)
        raw = {
            t: (series[t][-1] - series[t][first]) * scenario.tenants[t] if t in series else 0.0
            for t in tenants
        }
        total = sum(raw.values())
        shares = {t: ratio(raw[t], total) for t in tenants}
        devs = [abs(shares[t] / (scenario.tenants[t] / total_w) - 1) for t in tenants]
        bound = 2 * s["max_request_cost"]
        print(
            f"{variant:<10}"
            + "".join(f"{shares[t]:>12.3f}" for t in tenants)
            + f"{100 * max(devs):>10.1f}%{s['jain']:>9.3f}{s['max_charged_gap']:>10.0f}"
            f"{bound:>9.0f}{ratio(s['max_charged_gap'], bound):>11.2f}"
        )
    print(
        "\ntarget shares: " + ", ".join(f"{t} {scenario.tenants[t] / total_w:.3f}" for t in tenants)
    )
    print("targets: worst deviation <= 5%, gap/bound <= 1.00 (fairway)")


if __name__ == "__main__":
    main()
