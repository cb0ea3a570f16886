"""A child of `fairway up`, started so that neither a dead child nor a dead supervisor leaves
processes behind.

Each child runs in a process group of its own. vLLM's engine-core process and its workers do
not watch the worker that started them: a worker killed by SIGKILL (or the OOM killer) left
them running, holding the model and the KV cache (3-4 GB here, the GPU's memory on a GPU host),
while `fairway up` started a new worker beside them. Killing the dead child's group takes them
with it. And each child asks the kernel for SIGTERM when its supervisor dies, so a supervisor
killed outright does not leave an API holding its port and a worker holding the engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

SUPERVISOR_ENV = "FAIRWAY_SUPERVISOR_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def start_child(cmd: Sequence[str], env: dict[str, str],
                stdout: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """``cmd`` in a new process group (its id is the child's pid), told who supervises it. The
    terminal's Ctrl-C then reaches the supervisor alone, which stops the children in order."""
    return subprocess.Popen(
        list(cmd), env={**env, SUPERVISOR_ENV: str(os.getpid())}, process_group=0,
        stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None)


def kill_leftovers(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL whatever is left in ``proc``'s process group; call it once ``proc`` has exited
    (a group id is not handed out again while any process is still in that group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left
        os.killpg(proc.pid, signal.SIGKILL)


def die_with_supervisor() -> None:
    """In a child started by ``start_child``: SIGTERM this process when its supervisor dies.
    Elsewhere (no supervisor named, or not Linux) nothing. The variable is removed so that the
    engine's own processes, started from this one, do not take it for themselves."""
    supervisor = os.environ.pop(SUPERVISOR_ENV, None)
    if not supervisor or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # refused (a sandbox's seccomp): the supervisor's own shutdown still stops us
    if os.getppid() != int(supervisor):  # it died before the prctl: nobody will signal us
        os.kill(os.getpid(), signal.SIGTERM)


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the parenthesized name (state, parent pid, ...),
    or None when there is no such process (Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has exited)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in "ZX"
