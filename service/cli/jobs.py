"""`fairway jobs ...`: list, show and cancel your jobs through the API (docs/jobs-api.md).

Talks HTTP to the API with a tenant's API key (the SDK has no jobs resource). The server and
key come from the global options, the environment or the running stack (service.cli.target),
as for `fairway batch`.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import httpx

from scheduler.tiers import TIER_NAMES
from service.cli.errors import CLIError
from service.cli.table import print_table, when
from service.cli.target import api_key, api_root


def add_parser(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="your jobs (GET /v1/jobs, cancel)")
    cmds = jobs.add_subparsers(dest="sub", required=True)

    lst = cmds.add_parser("list", help="list jobs, newest first")
    lst.add_argument("--limit", type=int, default=20, help="jobs per page (at most 100)")
    lst.add_argument("--after", default=None, help="the last id of the previous page")
    lst.add_argument("--all", action="store_true", help="follow every page")
    lst.add_argument("--status", choices=["queued", "assigned", "running", "succeeded",
                                          "completed", "failed", "cancelled"],
                     help="only jobs in this status (completed: the same as succeeded)")
    lst.add_argument("--class", dest="job_class", choices=["realtime", "batch"],
                     help="only this job class")
    lst.add_argument("--tier", choices=TIER_NAMES,
                     help="only this service tier")
    lst.add_argument("--model", help="only jobs for this model")
    lst.add_argument("--batch-id", help="only the lines of this batch")
    lst.add_argument("--created-after", type=int, help="unix seconds, inclusive")
    lst.add_argument("--created-before", type=int, help="unix seconds, exclusive")
    lst.add_argument("--json", action="store_true", help="print the job objects as JSON lines")
    lst.set_defaults(func=cmd_list)

    for name, func, text in (("get", cmd_get, "show a job (JSON)"),
                             ("cancel", cmd_cancel, "cancel a queued or running job")):
        p = cmds.add_parser(name, help=text)
        p.add_argument("job_id")
        p.set_defaults(func=func)


def _client(args: argparse.Namespace) -> httpx.Client:
    return httpx.Client(base_url=api_root(args) + "/v1/", timeout=60,
                        headers={"Authorization": f"Bearer {api_key(args)}"})


def _call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    resp = client.request(method, path, **kwargs)
    if resp.is_success:
        body: dict[str, Any] = resp.json()
        return body
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text
    raise CLIError(f"the API refused: {message} ({resp.status_code})")


def _run(args: argparse.Namespace, work: Any) -> int:
    with _client(args) as client:
        work(client)
    return 0


def _row(job: dict[str, Any], now: float) -> tuple[str, ...]:
    usage = job.get("usage") or {}
    return (job["id"], job["status"], job["kind"], job["service_tier"], job["model"],
            when(job.get("created_at"), now), str(usage.get("completion_tokens", "-")),
            job.get("batch_id") or "-")


def cmd_list(args: argparse.Namespace) -> int:
    params = {"limit": args.limit, "after": args.after, "status": args.status,
              "class": args.job_class, "tier": args.tier, "model": args.model,
              "batch_id": args.batch_id, "created_after": args.created_after,
              "created_before": args.created_before}

    def work(client: httpx.Client) -> None:
        query = {k: v for k, v in params.items() if v is not None}
        rows, now = [], time.time()
        while True:
            page = _call(client, "GET", "jobs", params=query)
            for job in page["data"]:
                if args.json:
                    print(json.dumps(job))
                rows.append(_row(job, now))
            if not (args.all and page["has_more"]):
                break
            query["after"] = page["last_id"]
        if not args.json:
            print_table(("ID", "STATUS", "CLASS", "TIER", "MODEL", "CREATED", "OUT TOKENS",
                         "BATCH"), rows, empty="no jobs match")

    return _run(args, work)


def cmd_get(args: argparse.Namespace) -> int:
    return _run(args, lambda c: print(json.dumps(_call(c, "GET", f"jobs/{args.job_id}"),
                                                 indent=2)))


def cmd_cancel(args: argparse.Namespace) -> int:
    def work(client: httpx.Client) -> None:
        job = _call(client, "POST", f"jobs/{args.job_id}/cancel")
        print(f"{job['id']}: {job['status']}")

    return _run(args, work)
