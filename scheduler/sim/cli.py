"""``python -m scheduler.sim run SCENARIO.json [--policy P ...] [--out DIR] [--json]``."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from scheduler.sim.report import plot, summarize, table
from scheduler.sim.runner import VARIANTS, run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.traffic import generate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scheduler.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario under one or more policies")
    run.add_argument("scenario", type=Path)
    run.add_argument(
        "--policy",
        action="append",
        choices=sorted(VARIANTS),
        help="repeatable; default: the scenario's list",
    )
    run.add_argument("--out", type=Path, help="write PNG plots and summary.json here")
    run.add_argument("--json", action="store_true", help="print the summaries as JSON")
    run.add_argument("--duration", type=float, help="override the scenario's duration_s")
    return parser


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    scenario = Scenario.load(args.scenario)
    if args.duration is not None:
        scenario.duration_s = args.duration
    variants = args.policy or scenario.policies
    jobs = generate(
        scenario.traffic, scenario.tenants, scenario.duration_s, scenario.seed, scenario.model
    )
    results = [run_variant(scenario, v, list(jobs)) for v in variants]
    summaries = [summarize(r, scenario.default_ttft_slo_s) for r in results]
    if args.json:
        print(json.dumps([_clean(s) for s in summaries], indent=2))
    else:
        print(
            f"scenario {scenario.name}: {len(jobs)} jobs, "
            f"{sum(g.count for g in scenario.workers)} workers"
        )
        print(table(summaries))
    if args.out is not None:
        for path in plot(results, args.out):
            print(f"wrote {path}")
        (args.out / "summary.json").write_text(json.dumps([_clean(s) for s in summaries]))
    return 0
