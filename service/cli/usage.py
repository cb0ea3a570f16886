"""`fairway usage` and `fairway limits`: a tenant's own usage and limits through the API
(docs/usage.md), with the tenant's API key. The server and key come from the global options,
the environment or the running stack (service.cli.target), as for `fairway jobs`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from typing import Any

import httpx

from service.cli.errors import CLIError
from service.cli.table import print_table
from service.cli.target import api_key, api_root

WIDTHS = {"1m": 60, "1h": 3600, "1d": 86400}
_MOST_PER_PAGE = {"1m": 1440, "1h": 168, "1d": 31}  # the API's page maximum per width
_DEFAULT_SINCE = {"1m": "1h", "1h": "24h", "1d": "7d"}
_MAX_PAGES = 100  # a longer range wants a wider bucket
_UNITS = {"m": 60, "h": 3600, "d": 86400}
GROUPS = ("model", "api_key_id", "batch", "service_tier")


def add_parser(sub: Any) -> None:
    usage = sub.add_parser("usage", help="your usage per minute, hour or day "
                                         "(GET /v1/organization/usage/completions)")
    usage.add_argument("--width", choices=list(WIDTHS), default="1d", help="bucket width")
    usage.add_argument("--since", help="30m, 24h, 7d ago, or unix seconds (default: 1h for 1m "
                                       "buckets, 24h for 1h, 7d for 1d)")
    usage.add_argument("--until", type=int, help="unix seconds, exclusive (default: now)")
    usage.add_argument("--by", default="", help=f"group by, comma-separated: {', '.join(GROUPS)}")
    usage.add_argument("--model", action="append", default=[], help="only this model (repeat)")
    usage.add_argument("--key-id", action="append", default=[], help="only this key (repeat)")
    usage.add_argument("--csv", action="store_true", help="print the API's CSV")
    usage.add_argument("--json", action="store_true", help="print each page as JSON")
    usage.set_defaults(func=cmd_usage)
    limits = sub.add_parser("limits", help="your plan, rate limits and monthly budget "
                                           "(GET /v1/limits)")
    limits.add_argument("--json", action="store_true", help="print the JSON")
    limits.set_defaults(func=cmd_limits)


def since_seconds(spec: str, now: float, width_s: int) -> int:
    """Unix seconds, or `30m`, `24h`, `7d`: the buckets that long, the current one the last
    (24h of 1m buckets is 1,440 of them, what one CSV holds)."""
    if spec.isdigit():
        return int(spec)
    found = re.fullmatch(r"(\d+)([mhd])", spec)
    if found is None:
        raise CLIError(f"--since {spec!r}: give 30m, 24h, 7d or unix seconds")
    current = int(now) - int(now) % width_s
    return current + width_s - max(width_s, int(found[1]) * _UNITS[found[2]])


def _get(client: httpx.Client, path: str, params: dict[str, Any]) -> httpx.Response:
    resp = client.get(path, params=params)
    if resp.is_success:
        return resp
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text
    raise CLIError(f"the API refused: {message} ({resp.status_code})")


def _client(args: argparse.Namespace) -> httpx.Client:
    return httpx.Client(base_url=api_root(args) + "/v1/", timeout=60,
                        headers={"Authorization": f"Bearer {api_key(args)}"})


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "batch" if value else "realtime"
    return f"{value:,}" if isinstance(value, int) else str(value)


def cmd_usage(args: argparse.Namespace) -> int:
    now = time.time()
    start = since_seconds(args.since or _DEFAULT_SINCE[args.width], now, WIDTHS[args.width])
    end = args.until or int(now) + 1
    group_by = [g.strip() for g in args.by.split(",") if g.strip()]
    params: dict[str, Any] = {"start_time": start, "end_time": end, "bucket_width": args.width,
                              "group_by": group_by, "models": args.model,
                              "api_key_ids": args.key_id}
    with _client(args) as client:
        if args.csv:
            sys.stdout.write(_get(client, "organization/usage/completions",
                                  {**params, "format": "csv"}).text)
            return 0
        pages = (end - start) / (WIDTHS[args.width] * _MOST_PER_PAGE[args.width])
        if pages > _MAX_PAGES:
            raise CLIError(f"{args.width} buckets over that range take {int(pages)} pages; "
                           "use a wider --width or a later --since")
        params["limit"] = _MOST_PER_PAGE[args.width]
        rows: list[tuple[str, ...]] = []
        while True:
            page = _get(client, "organization/usage/completions", params).json()
            if args.json:
                print(json.dumps(page))
            for bucket in page["data"]:
                at = dt.datetime.fromtimestamp(bucket["start_time"], dt.UTC)
                for r in bucket["results"]:
                    rows.append((f"{at:%Y-%m-%d %H:%M}", *(_cell(r.get(g)) for g in group_by),
                                 *(_cell(r[m]) for m in ("num_model_requests", "input_tokens",
                                                         "input_cached_tokens",
                                                         "output_tokens"))))
            if not page["has_more"]:
                break
            params["page"] = page["next_page"]
    if not args.json:
        header = ("START (UTC)", *(g.upper() for g in group_by), "REQUESTS", "IN", "CACHED",
                  "OUT")
        print_table(header, rows, empty="no usage in that range")
    return 0


def _limit(value: int | None) -> str:
    return "unlimited" if value is None else f"{value:,}"


def cmd_limits(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = _get(client, "limits", {}).json()
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    plan, rate, now, month = (body["plan"] or {}), body["rate_limits"], body["current"], \
        body["monthly_tokens"]
    resets = dt.datetime.fromtimestamp(month["resets_at"], dt.UTC)

    def left(remaining: int | None, cap: int | None) -> str:
        return "unlimited" if cap is None else f"{remaining or 0:,} of {cap:,} left"

    print_table(("LIMIT", "NOW"), [
        ("organization", body["organization"]["name"]),
        ("plan", f"{plan.get('name', '-')} (TTFT target {plan.get('ttft_target_ms', '-')} ms, "
                 f"TPOT {plan.get('tpot_target_ms', '-')} ms)"),
        ("requests per minute", left(now["remaining_requests_per_1_minute"],
                                     rate["max_requests_per_1_minute"])),
        ("tokens per minute", left(now["remaining_tokens_per_1_minute"],
                                   rate["max_tokens_per_1_minute"])),
        ("concurrent requests", f"{now['open_concurrent_requests']:,} open of "
                                f"{_limit(rate['max_concurrent_requests'])}"),
        ("batch tokens enqueued", f"{now['batch_enqueued_tokens']:,} of "
                                  f"{_limit(rate['max_batch_enqueued_tokens'])}"),
        ("tokens this month", f"{month['used']:,} of {_limit(month['limit'])} "
                              f"(resets {resets:%Y-%m-%d %H:%M} UTC)"),
    ], empty="")
    return 0
