"""`fairway tenant ...`: tenants through the running stack's admin API (every change audited
as the CLI's): create, list, show (limits and this month's use), set (plan and quotas),
suspend, resume and delete (which asks for the tenant's name, typed, unless --yes)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from service.cli.errors import CLIError
from service.cli.table import print_table
from service.cli.target import AdminClient

# `tenant set`'s quota flags: (flag, the admin API's field, help).
QUOTA_FLAGS = (
    ("--rpm", "requests_per_minute", "requests per minute"),
    ("--tpm", "tokens_per_minute", "tokens per minute (prompt estimate plus max_tokens)"),
    ("--concurrency", "concurrent_requests", "open realtime requests at once"),
    ("--monthly-tokens", "monthly_tokens", "tokens a calendar month (UTC)"),
    ("--batch-tokens", "batch_enqueued_tokens", "tokens of batch work enqueued at once"),
    ("--alert-percent", "monthly_alert_percent", "warn at this percent of the month's budget"),
)
PLAN_DEFAULT = "plan"  # a quota flag's value that drops the override: the plan's applies


def add_parser(sub: Any) -> None:
    tenant = sub.add_parser("tenant", help="tenants (admin API)").add_subparsers(
        dest="sub", required=True, metavar="{create,list,show,set,suspend,resume,delete}")
    tc = tenant.add_parser("create", help="create a tenant and print its first API key")
    tc.add_argument("name", help="the tenant's name: letters, digits, '.', '_' and '-'")
    # --tier: the first spelling, kept working (the API's field is still named tier).
    tc.add_argument("--plan", "--tier", dest="plan", default="standard",
                    help="its plan (see `fairway plan list`)")
    tc.set_defaults(func=cmd_tenant_create)
    tenant.add_parser("list", help="list tenants").set_defaults(func=cmd_tenant_list)

    show = tenant.add_parser("show", help="a tenant's plan, limits and use this month")
    show.add_argument("name", help="the tenant's name")
    show.set_defaults(func=cmd_tenant_show)

    ts = tenant.add_parser("set", help="move a tenant to another plan or change its quotas "
                                       "(only the flags given change)")
    ts.add_argument("name", help="the tenant's name")
    ts.add_argument("--plan", "--tier", dest="plan", help="move it to this plan")
    for flag, field, text in QUOTA_FLAGS:
        ts.add_argument(flag, dest=field, type=_quota_value, metavar="N|unlimited|plan",
                        help=f"{text}: a number, 'unlimited', or 'plan' for the plan's")
    ts.set_defaults(func=cmd_tenant_set)

    for name, text in (("suspend", "stop a tenant's keys working; its queued work is "
                                   "cancelled"),
                       ("resume", "let a suspended tenant's keys work again")):
        p = tenant.add_parser(name, help=text)
        p.add_argument("name", help="the tenant's name")
        p.set_defaults(func=cmd_tenant_suspend, suspended=name == "suspend")

    td = tenant.add_parser("delete", help="delete a tenant, its keys and its history")
    td.add_argument("name", help="the tenant's name")
    td.add_argument("--yes", action="store_true",
                    help="do not ask for the tenant's name to be typed")
    td.set_defaults(func=cmd_tenant_delete)


def _quota_value(text: str) -> int | str:
    if text in ("unlimited", PLAN_DEFAULT):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a whole number, 'unlimited' or '{PLAN_DEFAULT}': {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def cmd_tenant_create(args: argparse.Namespace) -> int:
    out = AdminClient(args).call("POST", "/admin/tenants",
                                 json={"name": args.name, "tier": args.plan})
    print(f"tenant {out['name']} ({out['id']}), plan {out['tier']}")
    print(f"api key (shown once): {out['key']['key']}")
    return 0


def cmd_tenant_list(args: argparse.Namespace) -> int:
    rows = AdminClient(args).call("GET", "/admin/tenants")["data"]
    print_table(("NAME", "PLAN", "KEYS", "SUSPENDED", "ID"),
                [(t["name"], t["tier"], str(t["active_keys"] or 0),
                  "yes" if t["suspended"] else "no", t["id"]) for t in rows],
                empty="No tenants: create one with `fairway tenant create NAME`.")
    return 0


def _limit(value: Any) -> str:
    return "unlimited" if value in (None, "unlimited") else f"{value:,}"


def cmd_tenant_show(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.name)
    quotas = admin.call("GET", f"/admin/tenants/{tenant['id']}/quotas")
    effective, overrides, live = quotas["effective"], quotas["overrides"], quotas["live"]
    print(f"tenant {tenant['name']} ({tenant['id']})")
    print(f"  plan: {tenant['tier']}   active keys: {tenant['active_keys'] or 0}   "
          f"suspended: {'yes, since ' + tenant['suspended_at'] if tenant['suspended'] else 'no'}")
    rows = []
    for flag, field, text in QUOTA_FLAGS:
        source = "override" if field in overrides else "plan"
        rows.append((text, _limit(effective.get(field)), source, flag))
    print()
    print_table(("LIMIT", "VALUE", "FROM", "SET WITH"), rows, empty="")
    month, budget = live["monthly_tokens_used"], effective.get("monthly_tokens")
    share = (f" of {_limit(budget)} ({100 * month / budget:.0f}%)"
             if isinstance(budget, int) and budget > 0 else "")
    print()
    print(f"this month: {month:,} tokens used{share}"
          f"{'  (past the alert level)' if live['monthly_alert'] else ''}")
    print(f"now: {live['concurrent_requests_open']} open requests, "
          f"{live['batch_enqueued_tokens']:,} batch tokens enqueued")
    return 0


def cmd_tenant_set(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.name)
    changes = {field: getattr(args, field) for _, field, _ in QUOTA_FLAGS
               if getattr(args, field) is not None}
    if args.plan is None and not changes:
        raise CLIError("nothing to change: give --plan or at least one of "
                       + ", ".join(flag for flag, _, _ in QUOTA_FLAGS))
    if args.plan is not None:
        out = admin.call("PATCH", f"/admin/tenants/{tenant['id']}", json={"tier": args.plan})
        print(f"tenant {out['name']}: plan {out['tier']}")
    if changes:
        path = f"/admin/tenants/{tenant['id']}/quotas"
        overrides = dict(admin.call("GET", path)["overrides"])
        for field, value in changes.items():
            if value == PLAN_DEFAULT:
                overrides.pop(field, None)
            else:
                overrides[field] = value
        out = admin.call("PUT", path, json={"overrides": overrides})
        effective = out["effective"]
        print(f"tenant {tenant['name']}: " + ", ".join(
            f"{field} {_limit(effective.get(field))}" for field in changes))
    return 0


def cmd_tenant_suspend(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.name)
    out = admin.call("PATCH", f"/admin/tenants/{tenant['id']}",
                     json={"suspended": args.suspended})
    if out["suspended"]:
        print(f"tenant {out['name']} suspended: its keys are refused (403 tenant_suspended) "
              f"and its queued work is cancelled; `fairway tenant resume {out['name']}` "
              "undoes it")
    else:
        print(f"tenant {out['name']} resumed: its keys work again")
    return 0


def cmd_tenant_delete(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.name)
    if not args.yes:
        if not sys.stdin.isatty():
            raise CLIError("deleting a tenant asks for its name to be typed; without a "
                           "terminal, pass --yes")
        try:
            typed = input(f"This deletes tenant {tenant['name']}, its keys and its history. "
                          f"Type its name to confirm: ")
        except EOFError:
            typed = ""
        if typed.strip() != tenant["name"]:
            raise CLIError("the name typed does not match; nothing was deleted")
    admin.call("DELETE", f"/admin/tenants/{tenant['id']}")
    print(f"tenant {tenant['name']} deleted")
    return 0
