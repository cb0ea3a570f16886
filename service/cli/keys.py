"""`fairway key ...`: API keys through the running stack's admin API: create (with a policy:
its own limits within the tenant's, the models it may use, an expiry), list (never a secret),
set (change a key's policy) and revoke."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from typing import Any

from service.cli.errors import CLIError
from service.cli.table import print_table, when
from service.cli.target import AdminClient

# Policy flags shared by `key create` and `key set`: (flag, the admin API's field, help).
LIMIT_FLAGS = (
    ("--rpm", "requests_per_minute", "the key's own requests per minute"),
    ("--tpm", "tokens_per_minute", "the key's own tokens per minute"),
    ("--concurrency", "concurrent_requests", "the key's own open requests at once"),
)
NONE = "none"  # a limit flag's value in `key set` that drops the key's own limit
ALL_MODELS = "all"  # --models' value that opens the key to every model
NEVER = "never"  # --expires' value for a key that never expires
_SPAN = re.compile(r"^([1-9][0-9]*)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
MAX_SPAN = dt.timedelta(days=36500)


def add_parser(sub: Any) -> None:
    key = sub.add_parser("key", help="API keys (admin API)").add_subparsers(
        dest="sub", required=True, metavar="{create,list,set,revoke}")
    kc = key.add_parser("create", help="issue another API key for a tenant (shown once)")
    kc.add_argument("tenant", help="the tenant's name")
    kc.add_argument("--name", default="default", help="a label for the key")
    kc.add_argument("--expires", type=_expiry, default=None, metavar="30d|12h|DATE",
                    help="the key stops working after this long (<n>m, <n>h, <n>d) or at "
                         "this ISO date and time (UTC without an offset); default: never")
    kc.add_argument("--expires-in-days", type=_positive_days, default=None,
                    help=argparse.SUPPRESS)  # the first spelling, kept working
    kc.add_argument("--models", type=_models, default=None, metavar="A,B",
                    help="the only models the key may use (default: every model)")
    for flag, field, text in LIMIT_FLAGS:
        kc.add_argument(flag, dest=field, type=_limit, metavar="N",
                        help=f"{text}, within the tenant's (default: the tenant's alone)")
    kc.set_defaults(func=cmd_key_create)

    kl = key.add_parser("list", help="a tenant's keys: ids, prefixes, use, expiry, policy")
    kl.add_argument("tenant", help="the tenant's name")
    kl.set_defaults(func=cmd_key_list)

    ks = key.add_parser("set", help="change a key's policy (only the flags given change)")
    ks.add_argument("key_id", help="the key's id (see `fairway key list TENANT`)")
    ks.add_argument("--name", help="a new label")
    ks.add_argument("--expires", type=_expiry_or_never, metavar="30d|12h|DATE|never",
                    help="a new expiry, from now or at a date; 'never' removes it")
    ks.add_argument("--models", type=_models_or_all, metavar="A,B|all",
                    help="the only models the key may use; 'all' allows every model")
    for flag, field, text in LIMIT_FLAGS:
        ks.add_argument(flag, dest=field, type=_limit_or_none, metavar="N|none",
                        help=f"{text}; 'none' leaves only the tenant's")
    ks.set_defaults(func=cmd_key_set)

    kr = key.add_parser("revoke", help="revoke a key: it stops working at once")
    kr.add_argument("key_id", help="the key's id (see `fairway key list TENANT`)")
    kr.set_defaults(func=cmd_key_revoke)


def _positive_days(text: str) -> dt.datetime:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not days > 0 or days > 36500:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 36500")
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=days)


def _expiry(text: str) -> dt.datetime:
    span = _SPAN.match(text.strip())
    if span:
        delta = dt.timedelta(**{_UNITS[span[2]]: int(span[1])})
        if delta > MAX_SPAN:
            raise argparse.ArgumentTypeError("at most 36500 days")
        return dt.datetime.now(dt.UTC) + delta
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use <n>m, <n>h or <n>d (e.g. 30d), or a date such as 2027-01-31"
        ) from None
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    if at <= dt.datetime.now(dt.UTC):
        raise argparse.ArgumentTypeError(f"{text!r} is in the past")
    return at


def _expiry_or_never(text: str) -> dt.datetime | str:
    return NEVER if text == NEVER else _expiry(text)


def _models(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one model, e.g. --models a,b")
    return names


def _models_or_all(text: str) -> list[str] | str:
    return ALL_MODELS if text == ALL_MODELS else _models(text)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more (revoke a key that may not be used)")
    return value


def _limit_or_none(text: str) -> int | str:
    return NONE if text == NONE else _limit(text)


def _policy(key: dict[str, Any]) -> str:
    """One cell: the key's own limits and models, or '-' for none."""
    parts = [f"{short} {key[field]}" for short, field in (
        ("rpm", "requests_per_minute"), ("tpm", "tokens_per_minute"),
        ("concurrency", "concurrent_requests")) if key.get(field) is not None]
    if key.get("allowed_models") is not None:
        parts.append("models " + ",".join(key["allowed_models"]))
    return "; ".join(parts) or "-"


def _epoch(stamp: str | None) -> int | None:
    return int(dt.datetime.fromisoformat(stamp).timestamp()) if stamp else None


def _expires(stamp: str | None) -> str:
    if not stamp:
        return "never"
    return f"{dt.datetime.fromisoformat(stamp).astimezone():%Y-%m-%d %H:%M}"


def cmd_key_create(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    body: dict[str, Any] = {"name": args.name}
    expires = args.expires or args.expires_in_days
    if expires is not None:
        body["expires_at"] = expires.isoformat()
    if args.models is not None:
        body["allowed_models"] = args.models
    for _, field, _ in LIMIT_FLAGS:
        if getattr(args, field) is not None:
            body[field] = getattr(args, field)
    out = admin.call("POST", f"/admin/tenants/{tenant['id']}/keys", json=body)
    print(f"api key for {args.tenant} (shown once): {out['key']}")
    print(f"  id {out['id']}, expires {_expires(out['expires_at'])}, policy {_policy(out)}")
    return 0


def cmd_key_list(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    tenant = admin.tenant_by_name(args.tenant)
    keys = admin.call("GET", f"/admin/tenants/{tenant['id']}/keys")["data"]
    now = time.time()
    print_table(("ID", "NAME", "PREFIX", "STATUS", "CREATED", "LAST USED", "EXPIRES",
                 "POLICY"),
                [(k["id"], k["name"], k["prefix"] + "...", k["status"],
                  when(_epoch(k["created_at"]), now), when(_epoch(k["last_used_at"]), now),
                  _expires(k["expires_at"]), _policy(k)) for k in keys],
                empty=f"{args.tenant} has no keys: issue one with `fairway key create "
                      f"{args.tenant}`.")
    return 0


def cmd_key_set(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if args.name is not None:
        body["name"] = args.name
    if args.expires is not None:
        body["expires_at"] = None if args.expires == NEVER else args.expires.isoformat()
    if args.models is not None:
        body["allowed_models"] = None if args.models == ALL_MODELS else args.models
    for _, field, _ in LIMIT_FLAGS:
        value = getattr(args, field)
        if value is not None:
            body[field] = None if value == NONE else value
    if not body:
        raise CLIError("nothing to change: give at least one of --name, --expires, --models, "
                       + ", ".join(flag for flag, _, _ in LIMIT_FLAGS))
    out = AdminClient(args).call("PATCH", f"/admin/keys/{args.key_id}", json=body)
    print(f"key {out['prefix']}... ({out['name']}) of {out['tenant_name']}: expires "
          f"{_expires(out['expires_at'])}, policy {_policy(out)}")
    return 0


def cmd_key_revoke(args: argparse.Namespace) -> int:
    out = AdminClient(args).call("DELETE", f"/admin/keys/{args.key_id}")
    print(f"key {out['prefix']}... ({out['name']}) of {out['tenant_name']} revoked: it is "
          "refused from now on")
    return 0
