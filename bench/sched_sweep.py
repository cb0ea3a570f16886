"""Load sweep to the cliff on a public trace: realtime replayed from the trace at 20%..120% of
what the pool sustains alone, under a saturating batch backlog drawn from the same trace's
lengths, for Fairway, FCFS and "vLLM priority".

Per load point and policy: realtime SLO attainment (of the requests accepted, and of all,
refusals counted as misses), realtime p99 TTFT against realtime alone at the same load, and
batch output throughput against the capacity realtime leaves (``left (tok)``: batch alone
minus realtime-alone output, as bench/sched_rt_under_batch.py prints it). Its ``left (busy)``
is in the JSON only: a trace's long decodes keep realtime-alone engines busy nearly all the
time at small batches, so "engine time realtime leaves" says little here.

"Sustains alone" (load 100%): the largest rate scale at which realtime alone (Fairway's
engines, no batch, no door) keeps >= 99% of all its requests within the TTFT SLO, found by
bisection: the engines' capacity, so a change of admission does not move the load axis.
Past it, Fairway's admission refuses what would miss, so the accepted keep their SLO: the
API's door (``Scenario.door_admission``: the published outlook's prediction against 0.7 of
the target, ``scheduler.outlook.door_refusal``; ``--no-door`` leaves it out) and the policy's
own check at each pass. FCFS and vLLM priority have neither.

``--max-duration`` bounds the simulated time of a point (the batch backlog's cost grows
with it): at low loads only the window's first ``max_duration * rate scale`` trace seconds
are replayed, fewer requests, a noisier p99.

Seeds are trace windows: seed k replays [start + k * length, start + (k + 1) * length) of
the trace, so a few seeds are a few different stretches of traffic.

    python bench/sched_sweep.py --trace PATH [--name NAME] [--workers 2] [--window 0,600]
        [--seeds 1] [--loads 0.2,0.4,...] [--out DIR] [--json FILE]

The trace path comes from --trace or $FAIRWAY_TRACE; PNGs (bench/sweep_plot.py) go to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from sched_common import largest_passing_scale, ratio

from scheduler.sim.metrics import percentile
from scheduler.sim.runner import SimResult, run_variant
from scheduler.sim.scenario import Scenario
from scheduler.types import JobClass

POLICIES = ["fairway", "fcfs", "vllm-priority"]
LOADS = [0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.2]
CAPACITY_TARGET = 0.99  # realtime alone: share of all requests within the SLO
LEFT_FLOOR = 0.05  # capacity left below this share of batch alone: no "of left" ratio


def scenario(args: argparse.Namespace, seed: int, scale: float, *, rt: bool,
             batch: bool) -> Scenario:
    start, length = args.window
    lo = start + seed * length
    if args.max_duration:  # low loads: a shorter stretch of trace, so fewer requests
        length = min(length, args.max_duration * scale)
    duration = length / scale
    traffic: list[dict[str, Any]] = []
    if rt:
        traffic.append({
            "kind": "trace", "path": args.trace, "trace_window_s": [lo, lo + length],
            "rate_scale": scale, "tenant": "rt", "slo_ttft_s": args.slo,
            "max_prompt": args.max_prompt, "max_output": args.max_output,
        })
    if batch:  # a backlog that outlasts the run: twice what the pool could serve
        traffic.append({
            "kind": "trace", "path": args.trace, "arrivals": "flood", "tenant": "batch",
            "count": int(args.batch_per_worker_s * args.workers * (duration + args.drain)),
            "window_s": 86400.0, "max_prompt": args.max_prompt, "max_output": args.max_output,
        })
    return Scenario.from_dict({
        "name": args.name, "duration_s": duration, "drain_s": args.drain, "seed": seed,
        "model": "m", "default_ttft_slo_s": args.slo, "traffic": traffic,
        "door_admission": not args.no_door, "door_mode": args.door_mode,
        "max_queue_wait_s": args.max_queue_wait_s,
        "workers": [{"count": args.workers, "profile": args.profile, "models": ["m"]}],
    })


def realtime(result: SimResult, slo: float) -> dict[str, float]:
    """TTFT-SLO figures of the realtime requests. A request accepted but without a first
    token when the run stopped counts as a miss (TTFT infinite) if it had waited past the
    SLO by then, and is not judged otherwise."""
    end = result.end_s
    records = [r for r in result.metrics.records.values()
               if r.job.job_class is JobClass.REALTIME]
    rejected = sum(1 for r in records if r.rejected)
    accepted = [r for r in records if not r.rejected
                and (r.first_token is not None or r.job.arrival + slo < end)]
    ttft = [r.ttft if r.ttft is not None else math.inf for r in accepted]
    met = sum(1 for t in ttft if t <= slo)
    # What queue mode promises: the longest any accepted request waited for its first token
    # (one still waiting when the run stopped: what it had waited by then, a floor).
    waited = [r.ttft if r.ttft is not None else end - r.job.arrival for r in accepted]
    out_tokens = result.metrics.served_out.get("rt", 0)
    return {
        "n": len(records), "rejected": rejected,
        "slo_accepted": met / len(accepted) if accepted else math.nan,
        "slo_all": met / (len(accepted) + rejected) if accepted or rejected else math.nan,
        "p99": percentile(ttft, 99), "p50": percentile(ttft, 50),
        "max_wait": max(waited, default=math.nan),
        "out_tok_s": out_tokens / end if end > 0 else math.nan,
    }


def of_left(batch: float, left: float, flood: float) -> float:
    return ratio(batch, left) if left >= LEFT_FLOOR * flood else math.nan


def batch_tok_s(result: SimResult) -> float:
    return result.metrics.served_out.get("batch", 0) / result.end_s if result.end_s else math.nan


def capacity_scale(args: argparse.Namespace, seed: int) -> float:
    """The largest rate scale realtime alone sustains (bisection on a log scale)."""
    def ok(scale: float) -> bool:
        sc = scenario(args, seed, scale, rt=True, batch=False)
        sc.door_admission = False  # the engines' capacity, whatever the door would refuse
        r = realtime(run_variant(sc, "fairway"), args.slo)
        return r["slo_all"] >= CAPACITY_TARGET

    return largest_passing_scale(ok, bisect=args.bisect, floor=1 / 64, ceiling=1024) or 1 / 64


def sweep_seed(args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    cap = capacity_scale(args, seed)
    print(f"seed {seed}: realtime alone sustains rate scale {cap:.2f}", flush=True)
    rows = []
    for load in args.loads:
        scale = cap * load
        alone_result = run_variant(scenario(args, seed, scale, rt=True, batch=False), "fairway")
        alone = realtime(alone_result, args.slo)
        flood = batch_tok_s(run_variant(
            scenario(args, seed, scale, rt=False, batch=True), "fairway-noguard"))
        left = flood - alone["out_tok_s"]
        # Near the cliff realtime alone produces about what batch alone does: a ratio to
        # (almost) nothing left says nothing, so below LEFT_FLOOR of the pool it is not given.
        left_busy = flood * (1 - alone_result.busy_fraction)
        both = scenario(args, seed, scale, rt=True, batch=True)
        for policy in args.policies:
            result = run_variant(both, policy)
            rt = realtime(result, args.slo)
            b = batch_tok_s(result)
            rows.append({
                "trace": args.name, "seed": seed, "load": load, "rate_scale": scale,
                "policy": policy, "rt_n": rt["n"], "rejected": rt["rejected"],
                "slo_accepted": rt["slo_accepted"], "slo_all": rt["slo_all"],
                "p50": rt["p50"], "p99": rt["p99"], "max_wait": rt["max_wait"],
                "alone_p99": alone["p99"],
                "p99_vs_alone": ratio(rt["p99"], alone["p99"]),
                "batch_tok_s": b, "flood_tok_s": flood, "left_tok_s": left,
                "left": of_left(b, left, flood), "left_busy": ratio(b, left_busy),
                "preemptions": result.metrics.preemptions,
            })
            print_row(rows[-1], flush=True)
    return rows


HEADER = (f"{'load':>5} {'policy':<14}{'seed':>5}{'rt n':>6}{'rej':>6}{'slo acc':>9}"
          f"{'slo all':>9}{'p99 s':>8}{'wait max':>9}{'alone':>8}{'p99/al':>8}{'batch tok/s':>12}"
          f"{'left(tok)':>10}{'preempt':>8}")


def print_row(row: dict[str, Any], seed: str | None = None, flush: bool = False) -> None:
    print(
        f"{100 * row['load']:>4.0f}% {row['policy']:<14}{seed or row['seed']:>5}"
        f"{row['rt_n']:>6.0f}{row['rejected']:>6.0f}{100 * row['slo_accepted']:>8.1f}%"
        f"{100 * row['slo_all']:>8.1f}%{row['p99']:>8.3f}{row.get('max_wait', math.nan):>9.2f}"
        f"{row['alone_p99']:>8.3f}"
        f"{row['p99_vs_alone']:>7.2f}x{row['batch_tok_s']:>12.0f}"
        f"{_pct(row['left']):>10}{row['preemptions']:>8.0f}", flush=flush)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:.1f}%"


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for load in sorted({r["load"] for r in rows}):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            mine = [r for r in rows if r["load"] == load and r["policy"] == policy]
            med = {k: _median([r[k] for r in mine]) for k in mine[0]
                   if isinstance(mine[0][k], int | float) and k != "seed"}
            out.append({**mine[0], **med, "seed": "med"})
    return out


def _median(values: list[float]) -> float:
    """Over the seeds that have a value (NaN: none had one)."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=os.environ.get("FAIRWAY_TRACE"),
                   help="trace file (or $FAIRWAY_TRACE)")
    p.add_argument("--name", help="label of the trace in output (default: the file's stem)")
    p.add_argument("--profile", default="h200-llama3-8b")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--window", type=_floats, default=[0.0, 600.0],
                   help="START,LENGTH of trace seconds replayed (seed k: shifted k lengths)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--max-duration", type=float,
                   help="simulated s per point at most: low loads replay less of the window")
    p.add_argument("--loads", type=_floats, default=LOADS)
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--slo", type=float, default=0.5, help="realtime TTFT SLO (s)")
    p.add_argument("--max-prompt", type=int, default=16384)
    p.add_argument("--max-output", type=int, default=2048)
    p.add_argument("--drain", type=float, default=5.0, help="simulated s after the window")
    p.add_argument("--batch-per-worker-s", type=float, default=60.0,
                   help="batch jobs queued per worker per simulated second (saturating)")
    p.add_argument("--bisect", type=int, default=5, help="bisection steps for the capacity")
    p.add_argument("--no-door", action="store_true",
                   help="without the API's admission at the door (the policy's pass only)")
    p.add_argument("--door-mode", choices=["shed", "queue"], default="shed",
                   help="realtime's admission mode (a plan's): shed by the TTFT target, or "
                        "queue within --max-queue-wait-s")
    p.add_argument("--max-queue-wait-s", type=float, default=30.0,
                   help="queue mode: the longest predicted wait a request is admitted with")
    p.add_argument("--out", type=Path, help="write the PNG plots here")
    p.add_argument("--json", type=Path, help="write every row as JSON here")
    p.add_argument("--from-json", type=Path,
                   help="print and plot the rows of an earlier --json run, without running")
    args = p.parse_args(argv)
    if args.from_json:
        return replay(args)
    if not args.trace:
        p.error("give --trace PATH or set FAIRWAY_TRACE")
    args.name = args.name or Path(args.trace).stem
    args.policies = [x for x in args.policies.split(",") if x]
    print(f"sweep {args.name}: {args.workers} x {args.profile}, window {args.window}, "
          f"TTFT SLO {args.slo} s, policies {args.policies}, admission {args.door_mode}"
          + (f" (wait <= {args.max_queue_wait_s:g} s)" if args.door_mode == "queue" else ""))
    print(HEADER)
    rows: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        rows += sweep_seed(args, seed)
    summary = medians(rows) if args.seeds > 1 else rows
    if args.seeds > 1:
        print("\nmedians over the seeds:")
        print(HEADER)
        for row in summary:
            print_row(row, "med")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "rows": rows, "summary": summary}, indent=1))
    if args.out:
        from sweep_plot import plot

        for path in plot(summary, args.out, args.name):
            print(f"wrote {path}")
    return 0


def replay(args: argparse.Namespace) -> int:
    rows = json.loads(args.from_json.read_text())["rows"]
    for row in rows:  # LEFT_FLOOR may have changed since
        row["left"] = of_left(row["batch_tok_s"], row["left_tok_s"], row["flood_tok_s"])
    name = args.name or rows[0]["trace"]
    summary = medians(rows) if len({r["seed"] for r in rows}) > 1 else rows
    print(HEADER)
    for row in summary:
        print_row(row, str(row["seed"]))
    if args.out:
        from sweep_plot import plot

        for path in plot(summary, args.out, name):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
