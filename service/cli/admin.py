"""`fairway tenant ...` and `fairway key ...`: admin bootstrap through the running stack's
admin API, so keys are hashed with the server's own secret and every change is audited."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from service.cli.target import AdminClient


def add_parser(sub: Any) -> None:
    tenant = sub.add_parser("tenant", help="tenants (admin API)").add_subparsers(
        dest="sub", required=True, metavar="{create,list}")
    tc = tenant.add_parser("create", help="create a tenant and print its first API key")
    tc.add_argument("name", help="the tenant's name: letters, digits, '.', '_' and '-'")
    # --tier: the first spelling, kept working (the API's field is still named tier).
    tc.add_argument("--plan", "--tier", dest="plan", default="standard",
                    help="its plan (see /admin/tiers)")
    tc.set_defaults(func=cmd_tenant_create)
    tenant.add_parser("list", help="list tenants").set_defaults(func=cmd_tenant_list)

    key = sub.add_parser("key", help="API keys (admin API)").add_subparsers(
        dest="sub", required=True, metavar="{create}")
    kc = key.add_parser("create", help="issue another API key for a tenant (shown once)")
    kc.add_argument("tenant", help="the tenant's name")
    kc.add_argument("--name", default="default", help="a label for the key")
    kc.add_argument("--expires-in-days", type=_positive_days, default=None,
                    help="the key stops working after this many days (default: never)")
    kc.set_defaults(func=cmd_key_create)


def _positive_days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not days > 0 or days > 36500:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 36500")
    return days


def cmd_tenant_create(args: argparse.Namespace) -> int:
    out = AdminClient(args).call("POST", "/admin/tenants",
                                 json={"name": args.name, "tier": args.plan})
    print(f"tenant {out['name']} ({out['id']}), plan {out['tier']}")
    print(f"api key (shown once): {out['key']['key']}")
    return 0


def cmd_tenant_list(args: argparse.Namespace) -> int:
    rows = AdminClient(args).call("GET", "/admin/tenants")["data"]
    print(f"{'NAME':<24} {'PLAN':<12} {'KEYS':>4}  {'SUSPENDED':<9}  ID")
    for t in rows:
        print(f"{t['name']:<24} {t['tier']:<12} {t['active_keys'] or 0:>4}  "
              f"{'yes' if t['suspended'] else 'no':<9}  {t['id']}")
    return 0


def cmd_key_create(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    body: dict[str, Any] = {"name": args.name}
    if args.expires_in_days is not None:
        body["expires_at"] = (dt.datetime.now(dt.UTC)
                              + dt.timedelta(days=args.expires_in_days)).isoformat()
    out = admin.call("POST", f"/admin/tenants/{tenant['id']}/keys", json=body)
    print(f"api key for {args.tenant} (shown once): {out['key']}")
    return 0
