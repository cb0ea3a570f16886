"""`fairway logs [api|scheduler|worker]`: show and follow the logs `fairway up` writes for its
children (``logs/<role>.log`` in the data directory)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from service.cli.errors import CLIError
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
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    folder = logs_dir(data_dir(args))
    roles = [args.role] if args.role else list(ROLES)
    paths = {role: folder / f"{role}.log" for role in roles}
    if not any(p.exists() for p in paths.values()):
        raise CLIError(f"no logs in {folder}: `fairway up` writes them there (with --verbose "
                       "it prints them instead)")
    prefix = len(roles) > 1
    files: dict[str, IO[str]] = {}
    for role, path in paths.items():
        if path.exists():
            files[role] = _open_at_tail(path, max(0, args.lines), role if prefix else None)
    if args.no_follow:
        return 0
    try:
        while True:
            for role, path in paths.items():
                if role not in files and path.exists():
                    files[role] = path.open(errors="replace")
                fh = files.get(role)
                if fh is not None:
                    _print_new(fh, role if prefix else None)
            sys.stdout.flush()
            time.sleep(0.3)
    except KeyboardInterrupt:
        return 0


def _open_at_tail(path: Path, lines: int, prefix: str | None) -> IO[str]:
    fh = path.open(errors="replace")
    for line in deque(fh, maxlen=lines):  # reads to the end, keeping the last lines
        _emit(line, prefix)
    return fh


def _print_new(fh: IO[str], prefix: str | None) -> None:
    while line := fh.readline():
        _emit(line, prefix)


def _emit(line: str, prefix: str | None) -> None:
    sys.stdout.write(f"{prefix:<9} | {line}" if prefix else line)
