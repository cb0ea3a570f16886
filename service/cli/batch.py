"""`fairway batch ...`: submit a JSONL file, follow it with a progress bar, fetch the results.

Uses the official openai SDK, so it works against Fairway or any OpenAI-compatible server.
The server and key come from the global --base-url/--api-key, else OPENAI_BASE_URL/
OPENAI_API_KEY, else the stack `fairway up` runs (`service.cli.target`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from service.cli.errors import CLIError
from service.cli.table import print_table, when
from service.cli.target import openai_client

TERMINAL = {"completed", "failed", "expired", "cancelled"}
WINDOW = re.compile(r"^[1-9][0-9]*[smhd]$")
# A file id that names nothing: creating a batch from it tells whether the server takes a
# completion window (it checks the window first) without uploading anything.
PROBE_FILE_ID = "file-fairway-window-check"


def add_parser(sub: Any) -> None:
    batch = sub.add_parser("batch", help="batch inference (OpenAI Batches API)")
    cmds = batch.add_subparsers(dest="sub", required=True)

    submit = cmds.add_parser("submit", help="upload FILE.jsonl and create a batch")
    submit.add_argument("file", type=Path, help="the requests, one JSON object a line")
    submit.add_argument("--endpoint", default=None,
                        help="the requests' endpoint (default: the first line's url)")
    submit.add_argument("--window", default="24h",
                        help="completion_window: <n>s, <n>m, <n>h or <n>d that the server "
                             "allows")
    submit.add_argument("--wait", action="store_true", help="follow the batch until it ends "
                                                           "and download its results")
    submit.add_argument("--output", type=Path, default=None,
                        help="with --wait: write the results here, errors to "
                             "*.errors.jsonl (default: BATCH_ID.output.jsonl here)")
    submit.set_defaults(func=cmd_submit)

    lst = cmds.add_parser("list", help="list recent batches, newest first")
    lst.add_argument("--limit", type=_limit, default=20, help="how many (1-100)")
    lst.set_defaults(func=cmd_list)

    for name, func, text in (("status", cmd_status, "show a batch (JSON)"),
                             ("cancel", cmd_cancel, "cancel a batch")):
        p = cmds.add_parser(name, help=text)
        p.add_argument("batch_id", help="the batch's id (batch_...)")
        p.set_defaults(func=func)

    wait = cmds.add_parser("wait", help="follow a batch and download its results")
    wait.add_argument("batch_id", help="the batch's id (batch_...)")
    wait.add_argument("--output", type=Path, default=None,
                      help="write the results here, errors to *.errors.jsonl (default: "
                           "BATCH_ID.output.jsonl here)")
    wait.set_defaults(func=cmd_wait)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("must be from 1 to 100")
    return value


def _first_url(path: Path) -> str:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, 1):
            if raw.strip():
                try:
                    line = json.loads(raw)
                except ValueError:
                    raise CLIError(f"{path} line {number} is not JSON") from None
                if not isinstance(line, dict):
                    raise CLIError(f"{path} line {number} is not a JSON object")
                return str(line.get("url", "/v1/chat/completions"))
    raise CLIError(f"{path} is empty")


def _check_window(client: Any, window: str, endpoint: str) -> None:
    """Before anything is uploaded: a window of the wrong form, or one the server does not
    allow, stops here (it used to be refused after the upload, leaving the file behind)."""
    import openai

    if not WINDOW.match(window):
        raise CLIError(f"--window {window!r}: use <n>s, <n>m, <n>h or <n>d, e.g. 24h")
    if window == "24h":  # OpenAI's one window; every Fairway allows it by default
        return
    try:
        client.batches.create(input_file_id=PROBE_FILE_ID, endpoint=endpoint,
                              completion_window=window)
    except openai.BadRequestError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        if isinstance(error, dict) and error.get("param") == "completion_window":
            raise CLIError(f"--window {window}: {error.get('message')}") from None
    except openai.NotFoundError:
        pass  # the window passed; the probe's file does not exist, as meant


def cmd_submit(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise CLIError(f"no such file: {args.file}")
    endpoint = args.endpoint or _first_url(args.file)
    client = openai_client(args)
    _check_window(client, args.window, endpoint)
    with args.file.open("rb") as fh:
        uploaded = client.files.create(file=(args.file.name, fh), purpose="batch")
    try:
        batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint,
                                      completion_window=args.window)
    except Exception:
        client.files.delete(uploaded.id)  # no batch: the upload would be an orphan
        raise
    print(f"uploaded {uploaded.id} ({uploaded.bytes} bytes); batch {batch.id} {batch.status}")
    if not args.wait:
        print(f"follow it with: fairway batch wait {batch.id}")
        return 0
    return _follow(client, batch.id, args.output)


def cmd_wait(args: argparse.Namespace) -> int:
    return _follow(openai_client(args), args.batch_id, args.output)


def _follow(client: Any, batch_id: str, output: Path | None, poll_s: float = 1.0) -> int:
    """Follow the batch to its end and download its results. Ctrl-C stops only the
    following: the batch goes on on the server, and the user is told how to find it."""
    try:
        return _follow_until_done(client, batch_id, output, poll_s)
    except KeyboardInterrupt:
        print(f"\nstopped following batch {batch_id}; it goes on on the server.\n"
              f"  follow it again: fairway batch wait {batch_id}\n"
              f"  see its status:  fairway batch status {batch_id}\n"
              f"  cancel it:       fairway batch cancel {batch_id}", file=sys.stderr)
        return 130


def _follow_until_done(client: Any, batch_id: str, output: Path | None,
                       poll_s: float) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    batch = client.batches.retrieve(batch_id)  # an unknown id fails here, before the bar
    columns = (TextColumn("[bold]{task.fields[status]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("ok {task.fields[ok]} failed {task.fields[failed]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(batch_id, total=None, status=batch.status, ok=0, failed=0)
        while True:
            counts = batch.request_counts
            done = (counts.completed + counts.failed) if counts else 0
            progress.update(task, total=(counts.total or None) if counts else None,
                            completed=done, status=batch.status,
                            ok=counts.completed if counts else 0,
                            failed=counts.failed if counts else 0)
            if batch.status in TERMINAL:
                break
            time.sleep(poll_s)
            batch = client.batches.retrieve(batch_id)
    print(f"batch {batch.id}: {batch.status}")
    for err in (batch.errors.data if batch.errors and batch.errors.data else [])[:10]:
        print(f"  line {err.line}: {err.code}: {err.message}", file=sys.stderr)
    output = output or Path(f"{batch.id}.output.jsonl")
    wrote = _download(client, batch.output_file_id, output, "results")
    wrote += _download(client, batch.error_file_id, output.with_suffix(".errors.jsonl"),
                       "errors")
    if not wrote:
        print("no results to download (the batch has no output or error file)")
    return 0 if batch.status == "completed" else 1


def _download(client: Any, file_id: str | None, path: Path, what: str) -> int:
    if not file_id:
        return 0
    client.files.content(file_id).write_to_file(path)
    print(f"{what} written to {path}")
    return 1


def cmd_list(args: argparse.Namespace) -> int:
    page = openai_client(args).batches.list(limit=args.limit)
    now = time.time()
    rows = []
    for b in page.data:
        c = b.request_counts
        rows.append((b.id, b.status, f"{c.completed if c else 0}/{c.total if c else 0}",
                     str(c.failed if c else 0), when(b.created_at, now), b.endpoint))
    print_table(("ID", "STATUS", "DONE", "FAILED", "CREATED", "ENDPOINT"), rows,
                empty="no batches yet (submit one with: fairway batch submit FILE.jsonl)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    print(json.dumps(openai_client(args).batches.retrieve(args.batch_id).model_dump(),
                     indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    client = openai_client(args)
    batch = client.batches.retrieve(args.batch_id)
    if batch.status in TERMINAL:
        raise CLIError(f"batch {batch.id} has already ended ({batch.status}); nothing to "
                       "cancel")
    batch = client.batches.cancel(args.batch_id)
    print(f"batch {batch.id}: {batch.status}")
    return 0
