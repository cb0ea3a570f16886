"""What `fairway up` keeps in its data directory, so a first run explains itself and the other
commands find the running stack with no environment variables:

- ``admin-token``: the admin credential of this data directory, made on the first run (used
  unless ``FAIRWAY_ADMIN_TOKEN`` is set);
- ``demo-key``: the demo tenant's API key, kept across restarts;
- ``stack.json``: the running stack (API URL, database and Redis URLs, admin token, the
  supervisor's pid), written once it is ready and removed when it stops;
- ``logs/<role>.log``: each child's output.

The files with secrets are readable by their owner only (0600).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

ADMIN_TOKEN_FILE = "admin-token"
DEMO_KEY_FILE = "demo-key"
STATE_FILE = "stack.json"
LOGS_DIR = "logs"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable and writable by the owner only, from the first
    byte (the file is created 0600, not chmod-ed after)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)  # an older file of the same name may have had wider permissions
    os.replace(tmp, path)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def data_dir_admin_token(data_dir: Path) -> str:
    """This data directory's admin token, made (random, 256 bits) on first use."""
    path = data_dir / ADMIN_TOKEN_FILE
    token = read_text(path)
    if token is None:
        token = "fwadm-" + secrets.token_urlsafe(32)
        write_private(path, token + "\n")
    return token


def logs_dir(data_dir: Path) -> Path:
    return data_dir / LOGS_DIR


@dataclass(frozen=True)
class StackState:
    api_url: str  # the API's root, e.g. http://127.0.0.1:8000 (the OpenAI base URL adds /v1)
    database_url: str
    redis_url: str
    admin_token: str
    pid: int  # the `fairway up` supervisor

    def write(self, data_dir: Path) -> None:
        write_private(data_dir / STATE_FILE, json.dumps(asdict(self), indent=2) + "\n")


def running_stack(data_dir: Path) -> StackState | None:
    """The stack `fairway up` runs from ``data_dir``, or None (none recorded, or the one
    recorded is gone: its supervisor no longer runs)."""
    raw = read_text(data_dir / STATE_FILE)
    if raw is None:
        return None
    try:
        state = StackState(**json.loads(raw))
    except (ValueError, TypeError):
        return None
    return state if _alive(state.pid) else None


def forget_stack(data_dir: Path) -> None:
    (data_dir / STATE_FILE).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that pid now
        return False
    return True
