"""The `fairway chaos` command line."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("chaos-report.json")


def add_parser(sub: Any) -> None:
    chaos = sub.add_parser(
        "chaos", help="inject faults (kills, outages, a frozen worker or dispatcher) into a "
                      "private stack under load and report what clients saw")
    chaos.add_argument("--short", action="store_true",
                       help="short outages and less load (CI): a few minutes in all")
    chaos.add_argument("--default-timings", action="store_true",
                       help="run the stack with the default heartbeat and lease "
                            "(FAIRWAY_HEARTBEAT_SECONDS, FAIRWAY_LEASE_SECONDS) instead of the "
                            "harness's short ones, to measure a worker fault's stall as deployed")
    chaos.add_argument("--hosts", action="store_true",
                       help="run each process as its own host (network namespaces, as root, "
                            "two API replicas behind haproxy) and break the network between "
                            "them: cuts, a replica cut mid-stream, latency, loss "
                            "(docs/chaos.md#many-hosts)")
    chaos.add_argument("--only", default="",
                       help="comma-separated substrings of fault names to run (e.g. redis,kill)")
    # The global --data-dir (service.cli.options) sets it; listed here for this help text.
    chaos.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                       help="where the private servers and logs live (default: a temp dir, "
                            "removed afterwards unless a target is missed)")
    chaos.add_argument("--out", type=Path, default=DEFAULT_OUT,
                       help="the JSON report; the markdown table goes beside it (.md)")
    chaos.set_defaults(func=cmd_chaos)


def cmd_chaos(args: argparse.Namespace) -> int:
    from service.cli.chaos.report import markdown, write
    from service.cli.chaos.run import PassPlan, run_pass

    logging.basicConfig(level=logging.WARNING)
    if args.hosts:
        return cmd_chaos_hosts(args)
    plan = PassPlan.short() if args.short else PassPlan.full()
    if args.default_timings:
        plan = PassPlan(**{**plan.__dict__, "default_timings": True})
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        plan = PassPlan(**{**plan.__dict__,
                           "faults": [f for f in plan.faults
                                      if any(w in f.name or w in f.slug for w in wanted)]})
    given: Path | None = getattr(args, "data_dir", None)
    data_dir = given or Path(tempfile.mkdtemp(prefix="fairway-chaos-"))
    started = dt.datetime.now(dt.UTC)
    rows = run_pass(plan, data_dir, say=lambda line: print(line, flush=True))
    flags = (" --short" if args.short else "") + (" --default-timings"
                                                  if args.default_timings else "")
    title = f"fairway chaos{flags}, {started:%Y-%m-%d %H:%M} UTC"
    json_path, md_path = write(rows, plan.targets, title, args.out, {
        "pass": "short" if args.short else "full", "started": started.isoformat(),
        "default_timings": plan.default_timings,
        "load": plan.load.__dict__, "data_dir": str(data_dir)})
    print()
    print(markdown(rows, plan.targets, title))
    print(f"wrote {json_path} and {md_path}")
    missed = any(r.misses(plan.targets) for r in rows)
    if given is None and not missed:
        shutil.rmtree(data_dir, ignore_errors=True)
    elif missed:
        print(f"process logs kept in {data_dir / 'logs'}")
    return 1 if missed else 0


def cmd_chaos_hosts(args: argparse.Namespace) -> int:
    """`fairway chaos --hosts`: the network faults between hosts (``chaos.hosts``)."""
    from service.cli.chaos.hosts import run_hosts_pass
    from service.cli.chaos.netns import unavailable
    from service.cli.chaos.report import Targets, markdown, write

    why = unavailable()
    if why is not None:
        print(f"fairway chaos --hosts: skipped: {why}")
        return 0
    # SIGTERM unwinds like Ctrl-C, so the namespaces, rules and servers are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    given: Path | None = getattr(args, "data_dir", None)
    data_dir = given or Path(tempfile.mkdtemp(prefix="fairway-chaos-hosts-"))
    started = dt.datetime.now(dt.UTC)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    rows = run_hosts_pass(args.short, data_dir, wanted, say=lambda s: print(s, flush=True))
    title = f"fairway chaos --hosts{' --short' if args.short else ''}, {started:%Y-%m-%d %H:%M} UTC"
    targets = Targets()
    json_path, md_path = write(rows, targets, title, args.out, {
        "pass": "hosts-short" if args.short else "hosts", "started": started.isoformat(),
        "data_dir": str(data_dir)})
    print()
    print(markdown(rows, targets, title))
    print(f"wrote {json_path} and {md_path}")
    missed = any(r.misses(targets) for r in rows)
    if given is None and not missed:
        shutil.rmtree(data_dir, ignore_errors=True)
    elif missed:
        print(f"process logs kept in {data_dir / 'logs'}")
    return 1 if missed else 0
