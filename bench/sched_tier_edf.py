"""EDF across tenants of one priority against pure weighted fair share (VTC), in the
simulator: two tenants with equal weights and traffic, one on a tighter TTFT target.

Per tenant and variant: refused (the door's and the policy's), attainment of the accepted,
TTFT p50 / p99, and each tenant's share of the weighted service; per load scale and
admission mode. The goal: the tighter target is not refused or missed more than the looser
one, and the shares stay equal.

    python bench/sched_tier_edf.py [--scenario FILE] [--scales 0.8,1.2,1.6] [--modes shed,queue]
        [--slacks 0,4096]
"""

from __future__ import annotations

import argparse
import dataclasses

from sched_common import SCENARIOS, ratio

from scheduler.sim.metrics import JobRecord, percentile
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.traffic import generate


def scaled(scenario: Scenario, scale: float, mode: str, slack: float) -> Scenario:
    traffic = [dict(t, rate=t["rate"] * scale) for t in scenario.traffic]
    fairway = dict(scenario.fairway, edf_slack_units=slack)
    return dataclasses.replace(scenario, traffic=traffic, door_mode=mode, fairway=fairway)


def row(records: list[JobRecord], default_slo: float) -> dict[str, float]:
    accepted = [r for r in records if r.rejected is None]
    met = sum(1 for r in accepted if r.met_slo(default_slo))
    ttft = [r.ttft for r in accepted if r.ttft is not None]
    return {
        "n": len(records),
        "refused": ratio(len(records) - len(accepted), len(records)),
        "attained": ratio(met, len(accepted)),
        "p50": percentile(ttft, 50),
        "p99": percentile(ttft, 99),
        "out": sum(r.output for r in accepted if r.finished is not None),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default=str(SCENARIOS / "sched_tiers.json"))
    parser.add_argument("--scales", default="0.8,1.2,1.6")
    parser.add_argument("--modes", default="shed,queue")
    parser.add_argument("--slacks", default="0,4096")
    args = parser.parse_args()
    base = Scenario.load(args.scenario)
    tenants = sorted(base.tenants)
    print(f"scenario {base.name}: " + ", ".join(
        f"{t['tenant']} {t['rate']:g}/s target {t['slo_ttft_s']:g} s" for t in base.traffic))
    print(f"{'scale':>5} {'mode':>5} {'slack':>6} {'tenant':>7} {'n':>5} {'refused':>8} "
          f"{'attained':>9} {'p50 s':>6} {'p99 s':>6} {'share':>6}")
    for scale in (float(s) for s in args.scales.split(",")):
        for mode in args.modes.split(","):
            for slack in (float(s) for s in args.slacks.split(",")):
                scenario = scaled(base, scale, mode, slack)
                jobs = generate(scenario.traffic, scenario.tenants, scenario.duration_s,
                                scenario.seed, scenario.model)
                result = run_variant(scenario, "fairway", jobs)
                records = list(result.metrics.records.values())
                rows = {t: row([r for r in records if r.job.tenant == t],
                               scenario.default_ttft_slo_s) for t in tenants}
                total_out = sum(r["out"] for r in rows.values())
                for t in tenants:
                    r = rows[t]
                    print(f"{scale:>5g} {mode:>5} {slack:>6g} {t:>7} {r['n']:>5.0f} "
                          f"{r['refused']:>8.1%} {r['attained']:>9.1%} {r['p50']:>6.2f} "
                          f"{r['p99']:>6.2f} {ratio(r['out'], total_out):>6.2f}")


if __name__ == "__main__":
    main()
