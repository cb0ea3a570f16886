"""`fairway logs [api|scheduler|worker]`: show and follow the logs `fairway up` writes for its
children (``logs/<role>.log`` in the data directory): one readable line per record (``--json``:
as written), filtered by job, tenant or level (service.cli.logview)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from service.cli.errors import CLIError
from service.cli.logview import LEVELS, LineFilter, render
from service.cli.state import logs_dir
from service.cli.target import data_dir

ROLES = ("api", "scheduler", "worker")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("logs", help="show and follow the logs of `fairway up`'s processes")
    p.add_argument("role", nargs="?", choices=ROLES, default=None,
                   help="one process (default: all three, each line prefixed with its name)")
    p.add_argument("-n", "--lines", type=int, default=20,
                   help="lines of each log to show first")
    p.add_argument("--no-follow", action="store_true",
                   help="print the last lines and exit instead of following")
    p.add_argument("--json", action="store_true",
                   help="print the JSON lines as written, not the readable form")
    p.add_argument("--job", default=None,
                   help="only lines about this job (job_..., chatcmpl-..., resp_..., a batch "
                        "output line's req_... or its UUID) or batch (batch_...)")
    p.add_argument("--request-id", default=None,
                   help="only lines logged while serving this request (its x-request-id)")
    p.add_argument("--tenant", default=None, help="only lines about this tenant (id or name)")
    p.add_argument("--level", default=None, type=str.upper, choices=LEVELS,
                   help="only lines at this level or above")
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    folder = logs_dir(data_dir(args))
    roles = [args.role] if args.role else list(ROLES)
    paths = {role: folder / f"{role}.log" for role in roles}
    if not any(p.exists() for p in paths.values()):
        raise CLIError(f"no logs in {folder}: `fairway up` writes them there (with --verbose "
                       "it prints them instead)")
    prefix = len(roles) > 1
    view = _View(raw=args.json, only=LineFilter(job=args.job, tenant=args.tenant,
                                                level=args.level, request_id=args.request_id))
    files: dict[str, IO[str]] = {}
    for role, path in paths.items():
        if path.exists():
            files[role] = _open_at_tail(path, max(0, args.lines), role if prefix else None, view)
    if args.no_follow:
        return 0
    try:
        while True:
            for role, path in paths.items():
                if role not in files and path.exists():
                    files[role] = path.open(errors="replace")
                fh = files.get(role)
                if fh is not None:
                    _print_new(fh, role if prefix else None, view)
            sys.stdout.flush()
            time.sleep(0.3)
    except KeyboardInterrupt:
        return 0


class _View:
    def __init__(self, *, raw: bool, only: LineFilter) -> None:
        self.raw, self.only = raw, only


def _open_at_tail(path: Path, lines: int, prefix: str | None, view: _View) -> IO[str]:
    """The last ``lines`` lines that pass the filters, then the file to follow."""
    fh = path.open(errors="replace")
    shown: deque[str] = deque(maxlen=lines)
    for line in fh:  # reads to the end, keeping the last lines shown
        text = render(line, raw=view.raw, only=view.only)
        if text is not None:
            shown.append(text)
    for text in shown:
        _emit(text, prefix)
    return fh


def _print_new(fh: IO[str], prefix: str | None, view: _View) -> None:
    while line := fh.readline():
        text = render(line, raw=view.raw, only=view.only)
        if text is not None:
            _emit(text, prefix)


def _emit(line: str, prefix: str | None) -> None:
    sys.stdout.write(f"{prefix:<9} | {line}" if prefix else line)
