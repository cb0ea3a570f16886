"""`fairway job show ID`: any tenant's job or batch by any id a user quotes (job_, chatcmpl-,
batch_, a batch output line's req_, file-, a UUID; a custom_id with --batch), through the
admin API's explorer (GET /admin/search, then the job's or batch's detail): a job's timeline
step by step in UTC with milliseconds, where its time went and its facts; a batch's files,
lines and slowest and failed lines. The same answer the dashboard's Explore page draws."""

from __future__ import annotations

import argparse
import json
from typing import Any

from service.cli.table import print_table
from service.cli.target import AdminClient

_STEP_WORDS = {"created": "arrived, queued", "requeued": "back in the queue",
               "assigned": "placed on a worker", "started": "started",
               "first_token": "first token", "preempted": "preempted", "resumed": "resumed",
               "finished": "ended", "cancelled": "cancelled"}


def add_parser(sub: Any) -> None:
    job = sub.add_parser("job", help="look up any job or batch by id (admin API)")
    cmds = job.add_subparsers(dest="sub", required=True, metavar="{show}")
    show = cmds.add_parser("show", help="a job's timeline and facts, or a batch's detail, by "
                                        "any id a user quotes")
    show.add_argument("id", help="job_..., chatcmpl-..., batch_..., req_..., file-..., a UUID, "
                                 "or a custom_id with --batch")
    show.add_argument("--batch", default=None, help="the batch whose line has this custom_id")
    show.add_argument("--json", action="store_true", help="print the admin API's answer")
    show.set_defaults(func=cmd_job_show)


def cmd_job_show(args: argparse.Namespace) -> int:
    admin = AdminClient(args)
    params = {"q": args.id, **({"batch": args.batch} if args.batch else {})}
    found = admin.call("GET", "/admin/search", params=params)
    detail = admin.call("GET", found["url"])
    if args.json:
        print(json.dumps(detail, indent=2))
    elif found["kind"] == "job":
        print(job_text(detail))
    else:
        print_batch(detail)
    return 0


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,} ms"


def _clock(iso: str) -> str:
    return iso[11:23]


def job_text(job: dict[str, Any]) -> str:
    """The job as the terminal shows it: head, verdict, steps, phases, facts."""
    tenant, slo, took, tokens = job["tenant"], job["slo"], job["durations"], job["tokens"]
    lines = [f"{job['id']}  {job['status']}  tenant {tenant['name']} ({tenant['plan']})  "
             f"{job['kind']}/{job['service_tier']}  {job['model']}",
             "", job["verdict"], "", f"Steps ({job['steps'][0]['at'][:10]}, UTC):"]
    for step in job["steps"]:
        detail = " ".join(f"{k}={v}" for k, v in step["detail"].items() if v is not None)
        worker = f"  on {step['worker']}" if step["worker"] else ""
        lines.append(f"  {_clock(step['at'])}  {_STEP_WORDS.get(step['type'], step['type']):<20}"
                     f"{worker}{'  ' + detail if detail else ''}".rstrip())
    lines.append("Phases: " + " | ".join(
        f"{p['phase']} {p['ms']:,} ms{' (still going)' if p['open'] else ''}"
        for p in job["phases"]))
    lines += ["",
              f"Queue wait {_ms(took['queue_ms'])}, TTFT {_ms(took['ttft_ms'])}, "
              f"TPOT {_ms(took['tpot_ms'])}, total {_ms(took['total_ms'])}, "
              f"parked {_ms(took['parked_ms'])}",
              f"Tokens: {tokens['prompt']} prompt ({tokens['cached']} cached), "
              f"{tokens['completion']} completion of {job['max_tokens']}; "
              f"finish {job['finish_reason'] or '-'}",
              f"Attempt {job['attempt']}, worker {job['worker_id'] or '-'}"]
    if slo["plan"]:
        lines.append(f"SLO as admitted: {slo['plan']}, TTFT {_ms(slo['ttft_slo_ms'])}, "
                     f"TPOT {_ms(slo['tpot_slo_ms'])}; predicted TTFT "
                     f"{_ms(slo['predicted_ttft_ms'])}")
    if job["batch"]:
        batch = job["batch"]
        lines.append(f"Batch {batch['id']} line {batch['line_no']}, "
                     f"custom_id {batch['custom_id']}")
    if job["error"]:
        lines.append(f"Error: {job['error'].get('code')}: {job['error'].get('message')}")
    lines.append(f"Logs: fairway logs --job {job['id']}")
    return "\n".join(lines)


def print_batch(batch: dict[str, Any]) -> None:
    counts = batch["request_counts"]
    print(f"{batch['id']}  {batch['status']}  tenant {batch['tenant']['name']}  "
          f"{batch['model']}  {counts['total']} lines: {counts['completed']} completed, "
          f"{counts['failed']} failed, {counts.get('cancelled', 0)} cancelled")
    print()
    print_table(("FILE", "ID", "NAME", "BYTES", "LINES"),
                [(f["role"], f["id"], f["filename"] or "-", str(f["bytes"]), str(f["lines"]))
                 for f in batch["files"]], empty="no files")
    print()
    print("Lines by status: " + ", ".join(f"{k} {v}" for k, v in
                                          batch["lines_by_status"].items() if v))
    print()
    print("Slowest lines:")
    print_table(("LINE", "CUSTOM_ID", "JOB", "RAN", "STATUS"),
                [(str(x["line_no"]), x["custom_id"], x["job_id"], _ms(x["run_ms"]),
                  x["status"]) for x in batch["slowest_lines"]], empty="none ran")
    print()
    print("Failed lines:")
    print_table(("LINE", "CUSTOM_ID", "JOB", "CODE", "MESSAGE"),
                [(str(x["line_no"]), x["custom_id"], x["job_id"], x["code"] or "-",
                  x["message"] or "-") for x in batch["failed_lines"]], empty="none failed")
