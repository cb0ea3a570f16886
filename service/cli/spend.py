"""`fairway price list|set|unset`, `fairway spend` and `fairway budget show|set|remove`:
prices per model and class, spend in money and tenants' monthly budgets, through the running
stack's admin API (changes audited as the CLI's)."""

from __future__ import annotations

import argparse
import datetime as dt
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from service.cli.errors import CLIError
from service.cli.table import print_table
from service.cli.target import AdminClient

_CLASS_PRICES = ("batch_input_per_mtok", "batch_output_per_mtok", "flex_input_per_mtok",
                 "flex_output_per_mtok")
_GROUPS = ("tenant", "key", "model", "job_class", "day")


def money(text: str) -> str:
    """An amount as given (sent as a string, so no float touches it), checked to be one."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount (e.g. 0.15)") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of 0 or more")
    return text


def day(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def add_parser(sub: Any) -> None:
    price = sub.add_parser("price", help="model prices per million tokens (admin API)")
    price_sub = price.add_subparsers(dest="sub", required=True, metavar="{list,set,unset}")
    price_sub.add_parser("list", help="every priced or served model and what each class "
                                      "pays").set_defaults(func=cmd_price_list)
    ps = price_sub.add_parser("set", help="new prices for a model, in force from now (jobs "
                                          "that ended before keep theirs)")
    ps.add_argument("model")
    ps.add_argument("--input", type=money, required=True, help="input price per 1M tokens")
    ps.add_argument("--output", type=money, required=True, help="output price per 1M tokens")
    ps.add_argument("--batch-discount", type=money, help="percent off for batch (default 50)")
    ps.add_argument("--flex-discount", type=money, help="percent off for flex (default 50)")
    for field in _CLASS_PRICES:
        ps.add_argument("--" + field.removesuffix("_per_mtok").replace("_", "-"), type=money,
                        dest=field, help=f"explicit {field.split('_')[0]} "
                                         f"{field.split('_')[1]} price (instead of the "
                                         "discount)")
    ps.set_defaults(func=cmd_price_set)
    pu = price_sub.add_parser("unset", help="the model costs nothing from now (unpriced)")
    pu.add_argument("model")
    pu.set_defaults(func=cmd_price_unset)

    spend = sub.add_parser("spend", help="spend in money per tenant, key, model, class or day")
    spend.add_argument("--tenant", help="one tenant, by name")
    spend.add_argument("--by", choices=_GROUPS, default="tenant", help="how to sum it up")
    spend.add_argument("--since", type=day, help="first UTC day (default: this month's 1st)")
    spend.add_argument("--until", type=day, help="last UTC day (default: today)")
    spend.add_argument("--csv", type=Path, metavar="FILE",
                       help="write the CSV export (per day, tenant, key, model and class) "
                            "instead; - for standard output")
    spend.set_defaults(func=cmd_spend)

    budget = sub.add_parser("budget", help="tenants' monthly budgets in money")
    budget_sub = budget.add_subparsers(dest="sub", required=True,
                                       metavar="{show,set,remove}")
    bs = budget_sub.add_parser("show", help="a tenant's budget, spend and alerts this month")
    bs.add_argument("tenant", help="the tenant's name")
    bs.set_defaults(func=cmd_budget_show)
    bset = budget_sub.add_parser("set", help="set a tenant's monthly budget")
    bset.add_argument("tenant", help="the tenant's name")
    bset.add_argument("--monthly", type=money, required=True, help="the monthly limit")
    bset.add_argument("--thresholds", default="50,80,100",
                      help="alert at these percentages (default 50,80,100)")
    bset.add_argument("--hard-stop", action="store_true",
                      help="refuse new requests (429 insufficient_quota) once it is spent")
    bset.set_defaults(func=cmd_budget_set)
    br = budget_sub.add_parser("remove", help="no budget: no alerts, no stop")
    br.add_argument("tenant", help="the tenant's name")
    br.set_defaults(func=cmd_budget_remove)


def cmd_price_list(args: argparse.Namespace) -> int:
    out = AdminClient(args).call("GET", "/admin/prices")
    rows = []
    for p in out["data"]:
        if p["status"] != "priced":
            rows.append((p["model"], "unpriced (costs 0)", "", "", ""))
            continue
        c = p["classes"]
        rows.append((p["model"], *(f"{c[k]['input_per_mtok']} / {c[k]['output_per_mtok']}"
                                   for k in ("realtime", "batch", "flex")),
                     p["effective_from"][:16].replace("T", " ")))
    print(f"Prices in {out['currency']} per 1M tokens, input / output:")
    print_table(("MODEL", "REALTIME", "BATCH", "FLEX", "SINCE (UTC)"), rows,
                empty="No models: price one with `fairway price set MODEL --input X "
                      "--output Y`.")
    return 0


def cmd_price_set(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"model": args.model, "input_per_mtok": args.input,
                            "output_per_mtok": args.output}
    for flag, field in (("batch_discount", "batch_discount_pct"),
                        ("flex_discount", "flex_discount_pct")):
        if getattr(args, flag) is not None:
            body[field] = getattr(args, flag)
    body.update({f: getattr(args, f) for f in _CLASS_PRICES if getattr(args, f) is not None})
    out = AdminClient(args).call("PUT", "/admin/prices", json=body)
    c = out["classes"]
    print(f"{out['model']}: realtime {c['realtime']['input_per_mtok']} / "
          f"{c['realtime']['output_per_mtok']}, batch {c['batch']['input_per_mtok']} / "
          f"{c['batch']['output_per_mtok']}, flex {c['flex']['input_per_mtok']} / "
          f"{c['flex']['output_per_mtok']} per 1M tokens, from now (version {out['version']})")
    return 0


def cmd_price_unset(args: argparse.Namespace) -> int:
    AdminClient(args).call("DELETE", "/admin/prices", params={"model": args.model})
    print(f"{args.model}: unpriced from now (its jobs cost 0; earlier ones keep their price)")
    return 0


def _window(args: argparse.Namespace, admin: AdminClient) -> dict[str, str]:
    params = {k: v for k, v in (("since", args.since), ("until", args.until)) if v}
    if args.tenant:
        params["tenant_id"] = admin.tenant_by_name(args.tenant)["id"]
    return params


def cmd_spend(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    params = _window(args, admin)
    if args.csv is not None:
        resp = admin.http.get("/admin/spend/export.csv", params=params)
        if resp.status_code >= 400:
            admin.call("GET", "/admin/spend/export.csv", params=params)  # raises its message
        if str(args.csv) == "-":
            print(resp.text, end="")
        else:
            args.csv.write_text(resp.text)
            print(f"wrote {args.csv} ({resp.text.count(chr(10)) - 1} rows)")
        return 0
    out = admin.call("GET", "/admin/spend", params={**params, "group_by": args.by})
    name = {"tenant": "tenant_name", "key": "key_name"}.get(args.by, args.by)
    rows = [(str(r[name]), str(r["requests"]), str(r["prompt_tokens"]),
             str(r["completion_tokens"]), r["cost"],
             str(r["unpriced_requests"]) if r["unpriced_requests"] else "")
            for r in out["data"]]
    print(f"Spend {out['since']} to {out['until']} (UTC), in {out['currency']}:")
    print_table((args.by.upper().replace("_", " "), "REQUESTS", "INPUT TOKENS", "OUTPUT TOKENS",
                 "COST", "UNPRICED REQUESTS"), rows, empty="No requests ended in this window.")
    t = out["totals"]
    print(f"Total: {t['cost']} {out['currency']} for {t['requests']} requests")
    return 0


def cmd_budget_show(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    b = admin.call("GET", f"/admin/tenants/{tenant['id']}/budget")
    if b["monthly_limit"] is None:
        print(f"{args.tenant}: no budget; spent {b['spend']} {b['currency']} in {b['month']}")
        return 0
    stop = "hard stop" if b["hard_stop"] else "alerts only"
    state = " — STOPPED: new requests are refused" if b["stopped"] else ""
    print(f"{args.tenant}: {b['spend']} of {b['monthly_limit']} {b['currency']} in {b['month']} "
          f"({b['percent_used']}%), alerts at {', '.join(map(str, b['thresholds']))}%, "
          f"{stop}{state}")
    for a in b["alerts"]:
        print(f"  alerted {a['threshold_pct']}% at {a['sent_at'][:16].replace('T', ' ')} UTC "
              f"(spend {a['spend']}, event {a['event_id']})")
    return 0


def cmd_budget_set(args: argparse.Namespace) -> int:
    try:
        thresholds = [int(t) for t in args.thresholds.split(",") if t.strip()]
    except ValueError:
        raise CLIError(f"--thresholds {args.thresholds!r}: whole percentages, e.g. 50,80,100") \
            from None
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    admin.call("PUT", f"/admin/tenants/{tenant['id']}/budget",
               json={"monthly_limit": args.monthly, "thresholds": thresholds,
                     "hard_stop": args.hard_stop})
    return cmd_budget_show(args)


def cmd_budget_remove(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    admin.call("DELETE", f"/admin/tenants/{tenant['id']}/budget")
    print(f"{args.tenant}: no budget")
    return 0
