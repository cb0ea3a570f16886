"""LoRA adapters: adapter-aware placement (``FairwayConfig.adapter_aware``), with and
without holding a job whose adapter no worker has a slot for (``adapter_hold``), against
adapter-blind, in the simulator, at 10, 100 and 1,000 adapters.

Realtime traffic (Poisson, ``--rate`` requests/s) from ``--tenants`` tenants, each request
for one of N adapters drawn by Zipf popularity (``--zipf``), on ``--workers`` engines that
batch ``--max-loras`` distinct adapters per step, keep ``--max-cpu-loras`` loaded and take
``--load-s`` to load one (scheduler.sim.adapters). The default rate sits near the pool's
capacity for these lengths without adapters (``--rate`` x ``--output`` tokens/s of output
against what the engines sustain); ``--base`` also runs that base-model reference.

For each count and placement (``hold``: aware with holding; ``aware``: without; ``blind``):
output tok/s, TTFT p50 / p99 of the realtime requests that got a first token, adapter loads per
minute (all engines), SLO attainment (share of requests that met their TTFT target; refused or
unfinished ones miss), then the ratios to blind and hold / aware. With several ``--seeds``,
each figure is the median over the seeds (of each column on its own).

    python bench/sched_lora.py [--adapters 10,100,1000] [--workers 4] [--rate 80]
        [--duration 120] [--zipf 1.1] [--max-loras 4] [--max-cpu-loras 16] [--load-s 0.3]
        [--seeds 1,2,3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from typing import Any

from sched_common import ratio

from scheduler.sim.metrics import percentile
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario

PLACEMENTS = ("hold", "aware", "blind")
FIGURES = ("tok_s", "ttft_p50", "ttft_p99", "loads_min", "slo", "refused", "unfinished")


def scenario(args: argparse.Namespace, adapters: int | None, placement: str,
             seed: int) -> Scenario:
    traffic: list[dict[str, Any]] = []
    for t in range(args.tenants):
        spec: dict[str, Any] = {
            "kind": "poisson", "tenant": f"t{t}", "rate": args.rate / args.tenants,
            "prompt": {"dist": "lognormal", "median": args.prompt, "sigma": 0.5,
                       "max": 4 * args.prompt},
            "output": {"dist": "lognormal", "median": args.output, "sigma": 0.5},
            "max_tokens": 4 * args.output, "slo_ttft_s": args.slo,
        }
        if adapters is not None:  # the tenants share one popularity over all the adapters
            spec["adapters"] = {"count": adapters, "zipf_s": args.zipf}
        traffic.append(spec)
    return Scenario.from_dict({
        "name": f"lora-{adapters}", "duration_s": args.duration, "drain_s": args.drain,
        "seed": seed, "model": "m", "default_ttft_slo_s": args.slo,
        "workers": [{"count": args.workers, "profile": args.profile, "models": ["m"]}],
        "tenants": {f"t{t}": 1.0 for t in range(args.tenants)},
        "lora": {"max_loras": args.max_loras, "max_cpu_loras": args.max_cpu_loras,
                 "load_s": args.load_s},
        "fairway": {"adapter_aware": placement != "blind",
                    "adapter_hold": placement == "hold"},
        "traffic": traffic, "policies": ["fairway"],
    })


def measure(args: argparse.Namespace, adapters: int | None, placement: str,
            seed: int) -> dict[str, Any]:
    result = run_variant(scenario(args, adapters, placement, seed), "fairway")
    m = result.metrics
    records = list(m.records.values())
    ttft = [r.ttft for r in records if r.ttft is not None]
    met = sum(1 for r in records if r.met_slo(args.slo))
    return {
        "adapters": adapters, "placement": placement, "requests": len(records),
        "tok_s": sum(m.tokens_out.values()) / args.duration,
        "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
        "loads_min": m.adapter_loads / (result.end_s / 60.0) if result.end_s else math.nan,
        "slo": met / len(records) if records else math.nan,
        "refused": sum(1 for r in records if r.rejected),
        "unfinished": sum(1 for r in records if r.finished is None and not r.rejected),
        "wall_s": result.wall_s,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the seeds' runs of one count and placement."""
    row = {k: runs[0][k] for k in ("adapters", "placement")}
    for key in FIGURES:
        row[key] = statistics.median(r[key] for r in runs)
    return row


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'adapters':>9} {'placement':<10}{'out tok/s':>10}{'TTFT p50':>10}"
             f"{'TTFT p99':>10}{'loads/min':>10}{'SLO met':>9}{'refused':>8}{'unfinished':>11}"]
    for r in rows:
        count = "-" if r["adapters"] is None else str(r["adapters"])
        lines.append(f"{count:>9} {r['placement']:<10}{r['tok_s']:>10.0f}{r['ttft_p50']:>10.3f}"
                     f"{r['ttft_p99']:>10.3f}{r['loads_min']:>10.1f}{r['slo']:>9.1%}"
                     f"{r['refused']:>8.0f}{r['unfinished']:>11.0f}")
    return lines


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'adapters':>9}  {'':15}{'tok/s':>7}{'TTFT p50':>10}{'TTFT p99':>10}"
             f"{'loads/min':>10}{'SLO met':>9}"]
    by_key = {(r["adapters"], r["placement"]): r for r in rows}
    for count in sorted({r["adapters"] for r in rows if r["adapters"] is not None}):
        for top, bottom in (("hold", "blind"), ("aware", "blind"), ("hold", "aware")):
            a, b = by_key[(count, top)], by_key[(count, bottom)]
            lines.append(
                f"{count:>9}  {top + ' / ' + bottom + ':':15}{ratio(a['tok_s'], b['tok_s']):>7.2f}"
                f"{ratio(a['ttft_p50'], b['ttft_p50']):>10.2f}"
                f"{ratio(a['ttft_p99'], b['ttft_p99']):>10.2f}"
                f"{ratio(a['loads_min'], b['loads_min']):>10.2f}"
                f"{ratio(a['slo'], b['slo']):>9.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adapters", default="10,100,1000", help="adapter counts, comma-separated")
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument("--rate", type=float, default=80.0, help="requests/s, all tenants")
    p.add_argument("--prompt", type=int, default=512, help="median prompt tokens")
    p.add_argument("--output", type=int, default=128, help="median output tokens")
    p.add_argument("--slo", type=float, default=1.0, help="TTFT target (s)")
    p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of popularity")
    p.add_argument("--max-loras", type=int, default=4)
    p.add_argument("--max-cpu-loras", type=int, default=16)
    p.add_argument("--load-s", type=float, default=0.3)
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--drain", type=float, default=30.0)
    p.add_argument("--seeds", default="1", help="seeds, comma-separated (medians over them)")
    p.add_argument("--placements", default=",".join(PLACEMENTS),
                   help="of hold, aware, blind, comma-separated")
    p.add_argument("--base", action="store_true", help="also run the base model alone")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.adapters.split(",") if c]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    placements = [x for x in args.placements.split(",") if x]
    print(f"{args.workers} x {args.profile}, max_loras {args.max_loras}, max_cpu_loras "
          f"{args.max_cpu_loras}, load {args.load_s} s; {args.rate} req/s Poisson over "
          f"{args.duration:.0f} s, prompt ~{args.prompt} / output ~{args.output} tokens, "
          f"Zipf s={args.zipf}, TTFT target {args.slo} s, seeds {args.seeds}")
    rows = []
    if args.base:
        base = median_of([measure(args, None, "aware", seed) for seed in seeds])
        rows.append(base | {"placement": "base"})
    for count in counts:
        for placement in placements:
            rows.append(median_of([measure(args, count, placement, seed) for seed in seeds]))
    print("\n".join(table(rows)))
    if set(placements) == set(PLACEMENTS):
        print()
        print("\n".join(ratios(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
