"""Length-aware ordering on a trace: Fairway with ``length_aware`` off and on, batch job
completion times and deadline misses, realtime beside it.

Realtime is the trace's stretch at ``--rate-scale``; batch is a backlog from the same trace's
lengths (another stretch) submitted at once with a common completion window ``--deadline``,
asking ``--max-tokens`` each (so the predictor must learn the lengths; the trace's output is
what each produces), in ``--tenants`` tenants. A batch job misses when it finishes after its
deadline or has not finished when the deadline passes.

    python bench/sched_length_aware.py --trace PATH [--workers 2] [--rate-scale 3]
        [--count 3000] [--deadline 40] [--duration 60] [--aging 0.001]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from sched_common import ratio

from scheduler.sim.metrics import percentile
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.types import JobClass


def scenario(args: argparse.Namespace, aware: bool) -> Scenario:
    length = args.duration * args.rate_scale
    tenants = [f"batch-{i}" for i in range(args.tenants)]
    return Scenario.from_dict({
        "name": "length-aware", "duration_s": args.duration, "drain_s": 0.0, "seed": 1,
        "model": "m", "default_ttft_slo_s": args.slo, "door_admission": True,
        "workers": [{"count": args.workers, "profile": args.profile, "models": ["m"]}],
        "fairway": {"length_aware": aware, "length_aging_s_per_unit": args.aging},
        "traffic": [
            {"kind": "trace", "path": args.trace, "trace_window_s": [0, length],
             "rate_scale": args.rate_scale, "tenant": "rt", "slo_ttft_s": args.slo,
             "max_output": args.max_tokens},
            {"kind": "trace", "path": args.trace, "arrivals": "flood", "count": args.count,
             "trace_window_s": [length, math.inf], "max_tokens": args.max_tokens,
             "mix": [{"share": 1, "tenants": tenants, "class": "batch",
                      "window_s": args.deadline}]},
        ],
    })


def measure(args: argparse.Namespace, aware: bool) -> dict[str, Any]:
    result = run_variant(scenario(args, aware), "fairway")
    end = result.end_s
    records = list(result.metrics.records.values())
    batch = [r for r in records if r.job.job_class is JobClass.BATCH]
    done = [r for r in batch if r.finished is not None]
    jct = [r.e2e for r in done if r.e2e is not None]
    late = sum(1 for r in done if r.job.deadline is not None and r.finished is not None
               and r.finished > r.job.deadline)
    unfinished = sum(1 for r in batch if r.finished is None and r.job.deadline is not None
                     and r.job.deadline <= end)
    rt = [r.ttft for r in records if r.job.job_class is JobClass.REALTIME
          and not r.rejected and r.ttft is not None]
    served = sum(v for t, v in result.metrics.served_out.items() if t != "rt")
    return {
        "aware": aware, "batch": len(batch), "done": len(done),
        "done_by_deadline": len(done) - late, "misses": late + unfinished,
        "jct_mean": sum(jct) / len(jct) if jct else math.nan,
        "jct_p50": percentile(jct, 50), "jct_p99": percentile(jct, 99),
        "batch_tok_s": served / end if end else math.nan,
        "rt_p99": percentile(rt, 99), "rt_refused": sum(1 for r in records if r.rejected),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=os.environ.get("FAIRWAY_TRACE"))
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rate-scale", type=float, default=3.0, help="realtime arrival rate x")
    p.add_argument("--count", type=int, default=3000, help="batch jobs in the backlog")
    p.add_argument("--tenants", type=int, default=2, help="batch tenants")
    p.add_argument("--deadline", type=float, default=40.0, help="batch window (s)")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--slo", type=float, default=0.5)
    p.add_argument("--aging", type=float, default=0.001, help="s per predicted VTC unit")
    args = p.parse_args(argv)
    if not args.trace:
        p.error("give --trace PATH or set FAIRWAY_TRACE")
    print(f"{args.trace}: {args.workers} x {args.profile}, realtime x{args.rate_scale}, "
          f"{args.count} batch jobs due in {args.deadline:.0f} s, {args.duration:.0f} s run")
    rows = [measure(args, aware) for aware in (False, True)]
    print(f"{'length-aware':<13}{'batch':>7}{'done':>7}{'by dl':>7}{'misses':>8}"
          f"{'jct mean':>10}{'jct p50':>9}{'jct p99':>9}{'batch tok/s':>12}{'rt p99':>8}"
          f"{'refused':>8}")
    for r in rows:
        print(f"{'on' if r['aware'] else 'off':<13}{r['batch']:>7}{r['done']:>7}"
              f"{r['done_by_deadline']:>7}{r['misses']:>8}{r['jct_mean']:>10.2f}"
              f"{r['jct_p50']:>9.2f}{r['jct_p99']:>9.2f}{r['batch_tok_s']:>12.0f}"
              f"{r['rt_p99']:>8.3f}{r['rt_refused']:>8}")
    off, on = rows
    print(f"on / off: jct mean {ratio(on['jct_mean'], off['jct_mean']):.3f}x, done by deadline "
          f"{ratio(on['done_by_deadline'], off['done_by_deadline']):.3f}x, batch tok/s "
          f"{ratio(on['batch_tok_s'], off['batch_tok_s']):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
