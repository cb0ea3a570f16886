"""`fairway plan list` and `fairway plan set NAME ...`: tenant plans (weight, SLO targets, how
realtime requests are admitted and what happens past a rate limit) through the running
stack's admin API, audited as the CLI's changes. `set` changes only the fields it is given;
the rest keep their values."""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.errors import CLIError
from service.cli.table import print_table
from service.cli.target import AdminClient

# The flags of `plan set` and the plan fields they change.
_FIELDS = (("weight", float, "fair-share weight, more than 0"),
           ("ttft_slo_ms", int, "time-to-first-token target, ms"),
           ("tpot_slo_ms", int, "time-per-output-token target, ms"),
           ("max_queue_wait_ms", int,
            "queue mode: the longest predicted wait a realtime request is admitted with, ms"))


def add_parser(sub: Any) -> None:
    plan = sub.add_parser("plan", help="tenant plans (admin API)").add_subparsers(
        dest="sub", required=True, metavar="{list,set}")
    plan.add_parser("list", help="list plans: weight, targets, admission").set_defaults(
        func=cmd_plan_list)
    ps = plan.add_parser("set", help="change a plan's weight, targets or admission mode")
    ps.add_argument("name", help="the plan's name (see `fairway plan list`)")
    ps.add_argument("--admission-mode", choices=("queue", "shed"),
                    help="queue: admit while the predicted wait is within --max-queue-wait-ms; "
                         "shed: refuse a request predicted to miss its TTFT target")
    ps.add_argument("--over-quota", choices=("refuse", "overflow"),
                    help="past a rate limit: refuse (429), or overflow (run at batch "
                         "priority when capacity is idle)")
    for field, kind, text in _FIELDS:
        ps.add_argument("--" + field.replace("_", "-"), type=kind, help=text)
    ps.set_defaults(func=cmd_plan_set)


def _admission(plan: dict[str, Any]) -> str:
    if plan["admission_mode"] == "queue":
        return f"queue (wait <= {plan['max_queue_wait_ms'] / 1000:g} s)"
    return "shed (by TTFT target)"


def cmd_plan_list(args: argparse.Namespace) -> int:
    plans = AdminClient(args).call("GET", "/admin/tiers")["data"]
    print_table(("PLAN", "WEIGHT", "TTFT", "TPOT", "ADMISSION", "OVER QUOTA", "SERVICE TIERS"),
                [(p["name"], f"{p['weight']:g}", f"{p['ttft_slo_ms']} ms",
                  f"{p['tpot_slo_ms']} ms", _admission(p), p["over_quota"],
                  ", ".join(p["allowed_service_tiers"]))
                 for p in plans], empty="No plans: create one with the admin API.")
    return 0


def cmd_plan_set(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    plans = {p["name"]: p for p in admin.call("GET", "/admin/tiers")["data"]}
    plan = plans.get(args.name)
    if plan is None:
        raise CLIError(f"no plan named {args.name!r} (see `fairway plan list`)")
    changes = {field: getattr(args, field) for field, _, _ in _FIELDS
               if getattr(args, field) is not None}
    for choice in ("admission_mode", "over_quota"):
        if getattr(args, choice) is not None:
            changes[choice] = getattr(args, choice)
    if not changes:
        raise CLIError("nothing to change: give at least one of --admission-mode, --over-quota, "
                       + ", ".join("--" + f.replace("_", "-") for f, _, _ in _FIELDS))
    body = {key: plan[key] for key in ("weight", "allowed_service_tiers", "ttft_slo_ms",
                                       "tpot_slo_ms", "admission_mode", "max_queue_wait_ms",
                                       "over_quota", "quotas")}
    out = admin.call("PUT", f"/admin/tiers/{args.name}", json={**body, **changes})
    print(f"plan {out['name']}: weight {out['weight']:g}, TTFT {out['ttft_slo_ms']} ms, "
          f"TPOT {out['tpot_slo_ms']} ms, admission {_admission(out)}, over quota: "
          f"{out['over_quota']}")
    return 0
