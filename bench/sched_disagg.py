"""Prefill/decode disaggregation what-if: a mixed pool of N workers against every split P:D
(P + D = N) on a public trace's realtime, by goodput per GPU (docs/disaggregation.md).

Goodput (DistServe, Zhong et al., OSDI 2024): the highest request rate at which at least
``--attain`` (0.9; 0.99 with ``--p99``) of all requests meet both the TTFT and the TPOT SLO,
found by bisection on the trace's rate scale, divided by the number of GPUs. A request meets
them when it finished within the run, TTFT <= ``--ttft`` and TPOT <= ``--tpot`` (a one-token
request has no TPOT); refused or unfinished requests are misses. The same policy (Fairway,
realtime only: its engines' guard has no batch to hold back) places requests on the mixed
pool's workers and on the split pool's prefill workers (``scheduler.sim.disagg``).

After the goodput search, a load sweep: every configuration at ``--loads`` multiples of the
mixed pool's goodput rate, printing SLO attainment (both, TTFT only, TPOT only) and p90 TTFT
and TPOT.

Seeds are trace windows: seed k replays [start + k * length, start + (k + 1) * length); the
goodput is the median over seeds.

    python bench/sched_disagg.py --trace PATH [--workers 4] [--ttft 0.5] [--tpot 0.05]
        [--window 0,300] [--seeds 1] [--p99] [--link-gbps 400] [--latency-ms 1] [--json F]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sched_common import largest_passing_scale, ratio

from scheduler.sim.disagg import DisaggSimulation
from scheduler.sim.metrics import percentile
from scheduler.sim.runner import SimResult, run_variant
from scheduler.sim.scenario import Scenario

POLICY = "fairway"


def configs(n: int, only: list[str] | None) -> list[tuple[str, tuple[int, int] | None]]:
    """("mixed", None) and ("P:D", (P, D)) for every split of n workers."""
    out: list[tuple[str, tuple[int, int] | None]] = [("mixed", None)]
    out += [(f"{p}:{n - p}", (p, n - p)) for p in range(1, n)]
    return [c for c in out if only is None or c[0] in only]


def scenario(args: argparse.Namespace, seed: int, scale: float,
             split: tuple[int, int] | None) -> Scenario:
    start, length = args.window
    lo = start + seed * length
    data: dict[str, Any] = {
        "name": args.name, "duration_s": length / scale, "drain_s": args.drain, "seed": seed,
        "model": "m", "default_ttft_slo_s": args.ttft,
        "traffic": [{
            "kind": "trace", "path": args.trace, "trace_window_s": [lo, lo + length],
            "rate_scale": scale, "tenant": "rt", "slo_ttft_s": args.ttft,
            "slo_tpot_s": args.tpot, "max_prompt": args.max_prompt,
            "max_output": args.max_output,
        }],
        "workers": [{"count": args.workers, "profile": args.profile, "models": ["m"],
                     **({"max_slots": args.max_slots} if args.max_slots else {}),
                     **({"token_budget": args.token_budget} if args.token_budget else {})}],
    }
    if split is not None:
        data["disaggregation"] = {
            "prefill_workers": split[0], "decode_workers": split[1],
            "link_gbps": args.link_gbps, "transfer_latency_ms": args.latency_ms,
            "decode_max_slots": args.decode_max_slots,
        }
    return Scenario.from_dict(data)


def judge(result: SimResult, args: argparse.Namespace) -> dict[str, float]:
    """SLO attainment of all requests (refused and unfinished ones miss)."""
    records = list(result.metrics.records.values())
    n = len(records)
    ttft = [r.ttft if r.ttft is not None and not r.rejected else math.inf for r in records]
    tpot = [r.tpot if r.tpot is not None else (0.0 if r.finished else math.inf)
            for r in records]
    ttft_ok = [t <= args.ttft for t in ttft]
    tpot_ok = [r.finished is not None and not r.rejected and t <= args.tpot
               for r, t in zip(records, tpot, strict=True)]
    return {
        "n": n,
        "both": sum(a and b for a, b in zip(ttft_ok, tpot_ok, strict=True)) / n,
        "ttft": sum(ttft_ok) / n, "tpot": sum(tpot_ok) / n,
        "ttft_p90": percentile(ttft, 90), "tpot_p90": percentile(tpot, 90),
        "rejected": sum(1 for r in records if r.rejected), "busy": result.busy_fraction,
    }


def run(args: argparse.Namespace, seed: int, scale: float,
        split: tuple[int, int] | None) -> dict[str, float]:
    args.runs += 1
    sc = scenario(args, seed, scale, split)
    if split is None:
        out = judge(run_variant(sc, POLICY), args)
        out["kv_wait_p90"] = out["transfer_mean"] = math.nan
    else:  # where a split's TPOT goes: waiting for decode room, and the transfer itself
        sim = DisaggSimulation(sc, POLICY)
        out = judge(sim.run(), args)
        spans = [(h.ready, h.start, h.end) for h in sim.handoffs.values()
                 if h.start is not None and h.end is not None]
        out["kv_wait_p90"] = percentile([start - ready for ready, start, _ in spans], 90)
        out["transfer_mean"] = (statistics.fmean(end - start for _, start, end in spans)
                                if spans else math.nan)
    out["rate"] = out["n"] * scale / args.window[1]  # requests per simulated second
    return out


def goodput_scale(args: argparse.Namespace, seed: int, split: tuple[int, int] | None) -> float:
    """The largest rate scale meeting the attainment target (log bisection); 0: none."""
    def ok(scale: float) -> bool:
        return run(args, seed, scale, split)["both"] >= args.attain

    return largest_passing_scale(ok, bisect=args.bisect, floor=1 / 256, ceiling=4096)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=os.environ.get("FAIRWAY_TRACE"),
                   help="trace file (or $FAIRWAY_TRACE)")
    p.add_argument("--name", help="label of the trace in output (default: the file's stem)")
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--workers", type=int, default=4, help="N: GPUs in every configuration")
    p.add_argument("--splits", help="comma list of configurations to run, e.g. mixed,1:3")
    p.add_argument("--window", type=_floats, default=[0.0, 300.0],
                   help="START,LENGTH of trace seconds replayed (seed k: shifted k lengths)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--ttft", type=float, default=0.5, help="TTFT SLO (s)")
    p.add_argument("--tpot", type=float, default=0.05, help="TPOT SLO (s)")
    p.add_argument("--attain", type=float, default=0.9, help="share that must meet both SLOs")
    p.add_argument("--p99", action="store_true", help="--attain 0.99")
    p.add_argument("--link-gbps", type=float, default=400.0)
    p.add_argument("--latency-ms", type=float, default=1.0)
    p.add_argument("--max-slots", type=int,
                   help="every worker's max_slots (mixed, prefill and decode); default: the "
                        "profile's")
    p.add_argument("--decode-max-slots", type=int, help="decode workers' max_slots only")
    p.add_argument("--token-budget", type=int,
                   help="every worker's tokens per step (chunked prefill); default: the "
                        "profile's (8192 on H200)")
    p.add_argument("--max-prompt", type=int, default=16384)
    p.add_argument("--max-output", type=int, default=2048)
    p.add_argument("--drain", type=float, default=30.0, help="simulated s after the window")
    p.add_argument("--bisect", type=int, default=5, help="bisection steps per goodput")
    p.add_argument("--loads", type=_floats, default=[0.5, 0.75, 1.0, 1.25, 1.5],
                   help="sweep points, multiples of the mixed pool's goodput rate")
    p.add_argument("--json", type=Path, help="write the results as JSON here")
    args = p.parse_args(argv)
    if not args.trace:
        p.error("give --trace PATH or set FAIRWAY_TRACE")
    if args.p99:
        args.attain = 0.99
    args.name = args.name or Path(args.trace).stem
    args.runs = 0
    cpu0 = time.process_time()
    only = [x for x in args.splits.split(",") if x] if args.splits else None
    cfgs = configs(args.workers, only)
    print(f"disaggregation {args.name}: N={args.workers} x {args.profile}, window "
          f"{args.window}, SLO TTFT {args.ttft} s + TPOT {args.tpot * 1000:.0f} ms for "
          f"{100 * args.attain:.0f}%, link {args.link_gbps} Gb/s + {args.latency_ms} ms, "
          f"max slots {args.max_slots or 'profile'}, token budget "
          f"{args.token_budget or 'profile'}")
    good: dict[str, list[float]] = {}
    rates: dict[str, list[float]] = {}
    for label, split in cfgs:
        for seed in range(args.seeds):
            scale = goodput_scale(args, seed, split)
            rate = run(args, seed, scale, split)["rate"] if scale > 0 else 0.0
            good.setdefault(label, []).append(scale)
            rates.setdefault(label, []).append(rate)
    print("\ngoodput (median over seeds; per GPU = rate / N)")
    print(f"{'config':<8}{'scale':>8}{'req/s':>9}{'req/s/GPU':>11}{'vs mixed':>10}")
    base = statistics.median(rates["mixed"]) if "mixed" in rates else math.nan
    table = []
    for label, _ in cfgs:
        rate = statistics.median(rates[label])
        row = {"config": label, "scale": statistics.median(good[label]), "rate": rate,
               "per_gpu": rate / args.workers, "vs_mixed": ratio(rate, base)}
        table.append(row)
        print(f"{label:<8}{row['scale']:>8.2f}{rate:>9.2f}{row['per_gpu']:>11.2f}"
              f"{row['vs_mixed']:>9.2f}x")
    sweep = []
    mixed_scale = statistics.median(good.get("mixed", [1.0])) or 1.0
    print(f"\nload sweep (seed 0; load = multiple of the mixed pool's goodput, scale "
          f"{mixed_scale:.2f})")
    print(f"{'load':>5} {'config':<8}{'req/s':>8}{'both':>8}{'ttft':>8}{'tpot':>8}"
          f"{'ttft p90':>10}{'tpot p90':>10}{'busy':>7}{'kv wait p90':>13}{'xfer mean':>11}")
    for load in args.loads:
        for label, split in cfgs:
            r = run(args, 0, mixed_scale * load, split)
            sweep.append({"load": load, "config": label, **r})
            print(f"{100 * load:>4.0f}% {label:<8}{r['rate']:>8.2f}{100 * r['both']:>7.1f}%"
                  f"{100 * r['ttft']:>7.1f}%{100 * r['tpot']:>7.1f}%{r['ttft_p90']:>10.3f}"
                  f"{1000 * r['tpot_p90']:>8.1f}ms{100 * r['busy']:>6.0f}%"
                  f"{_ms(r['kv_wait_p90'], 1):>13}{_ms(r['transfer_mean'], 2):>11}",
                  flush=True)
    cpu = time.process_time() - cpu0
    print(f"\n{args.runs} simulations, CPU time {cpu:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "args": {k: str(v) for k, v in vars(args).items()}, "goodput": table,
            "per_seed": {"scale": good, "rate": rates}, "sweep": sweep}, indent=1))
    return 0


def _ms(seconds: float, digits: int) -> str:
    return "-" if math.isnan(seconds) else f"{1000 * seconds:.{digits}f}ms"


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


if __name__ == "__main__":
    sys.exit(main())
