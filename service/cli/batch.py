"""`fairway batch ...`: submit a JSONL file, follow it with a progress bar, fetch the results.

Uses the official openai SDK, so it works against Fairway or any OpenAI-compatible server.
The server and key come from --base-url/--api-key, else OPENAI_BASE_URL/OPENAI_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def add_parser(sub: Any) -> None:
    batch = sub.add_parser("batch", help="batch inference (OpenAI Batches API)")
    batch.add_argument("--base-url", default=None, help="default: $OPENAI_BASE_URL")
    batch.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    cmds = batch.add_subparsers(dest="sub", required=True)

    submit = cmds.add_parser("submit", help="upload FILE.jsonl and create a batch")
    submit.add_argument("file", type=Path)
    submit.add_argument("--endpoint", default=None,
                        help="default: the first line's url")
    submit.add_argument("--window", default="24h", help="completion_window")
    submit.add_argument("--wait", action="store_true", help="follow until it ends")
    submit.add_argument("--output", type=Path, default=None,
                        help="with --wait: write the output file here (errors to *.errors.jsonl)")
    submit.set_defaults(func=cmd_submit)

    lst = cmds.add_parser("list", help="list recent batches")
    lst.add_argument("--limit", type=int, default=20)
    lst.set_defaults(func=cmd_list)

    for name, func, text in (("status", cmd_status, "show a batch"),
                             ("cancel", cmd_cancel, "cancel a batch")):
        p = cmds.add_parser(name, help=text)
        p.add_argument("batch_id")
        p.set_defaults(func=func)

    wait = cmds.add_parser("wait", help="follow a batch and download its results")
    wait.add_argument("batch_id")
    wait.add_argument("--output", type=Path, default=None)
    wait.set_defaults(func=cmd_wait)


def _client(args: argparse.Namespace) -> Any:
    import openai

    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    if not base_url or not api_key:
        raise SystemExit("set --base-url/--api-key or OPENAI_BASE_URL/OPENAI_API_KEY")
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=3, timeout=600)


def _first_url(path: Path) -> str:
    with path.open("rb") as fh:
        for raw in fh:
            if raw.strip():
                return str(json.loads(raw).get("url", "/v1/chat/completions"))
    raise SystemExit(f"{path} is empty")


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    endpoint = args.endpoint or _first_url(args.file)
    with args.file.open("rb") as fh:
        uploaded = client.files.create(file=(args.file.name, fh), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint,
                                  completion_window=args.window)
    print(f"uploaded {uploaded.id} ({uploaded.bytes} bytes); batch {batch.id} {batch.status}")
    if not args.wait:
        return 0
    return _follow(client, batch.id, args.output)


def cmd_wait(args: argparse.Namespace) -> int:
    return _follow(_client(args), args.batch_id, args.output)


def _follow(client: Any, batch_id: str, output: Path | None, poll_s: float = 1.0) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("[bold]{task.fields[status]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("ok {task.fields[ok]} failed {task.fields[failed]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(batch_id, total=None, status="validating", ok=0, failed=0)
        while True:
            batch = client.batches.retrieve(batch_id)
            counts = batch.request_counts
            done = (counts.completed + counts.failed) if counts else 0
            progress.update(task, total=(counts.total or None) if counts else None,
                            completed=done, status=batch.status,
                            ok=counts.completed if counts else 0,
                            failed=counts.failed if counts else 0)
            if batch.status in TERMINAL:
                break
            time.sleep(poll_s)
    print(f"batch {batch.id}: {batch.status}")
    for err in (batch.errors.data if batch.errors and batch.errors.data else [])[:10]:
        print(f"  line {err.line}: {err.code}: {err.message}", file=sys.stderr)
    if output is not None:
        _download(client, batch.output_file_id, output)
        _download(client, batch.error_file_id, output.with_suffix(".errors.jsonl"))
    return 0 if batch.status == "completed" else 1


def _download(client: Any, file_id: str | None, path: Path) -> None:
    if not file_id:
        return
    client.files.content(file_id).write_to_file(path)
    print(f"wrote {path}")


def cmd_list(args: argparse.Namespace) -> int:
    page = _client(args).batches.list(limit=args.limit)
    for b in page.data:
        c = b.request_counts
        print(f"{b.id}  {b.status:<11} {c.completed if c else 0}/{c.total if c else 0} ok, "
              f"{c.failed if c else 0} failed  {b.endpoint}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    print(json.dumps(_client(args).batches.retrieve(args.batch_id).model_dump(), indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    batch = _client(args).batches.cancel(args.batch_id)
    print(f"batch {batch.id}: {batch.status}")
    return 0
