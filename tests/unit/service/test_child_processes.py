"""A child of `fairway up` leaves nothing behind: what it started dies with it (vLLM's
engine-core process outlived a worker killed by SIGKILL), and it dies with its supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.cli.child_processes import is_running, kill_leftovers, start_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

ROOT = Path(__file__).resolve().parents[3]


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return not is_running(pid)


def _read_pid(stream: object) -> int:
    line = stream.readline()  # type: ignore[attr-defined]
    assert line, "the child printed no pid"
    return int(line)


# A child that starts a grandchild which, like vLLM's engine core, does not watch its parent.
_PARENT_OF_A_STRAY = (
    "import subprocess, sys, time\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(g.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_what_a_killed_child_started_is_killed_with_it():
    child = start_child([sys.executable, "-c", _PARENT_OF_A_STRAY], dict(os.environ),
                        stdout=subprocess.PIPE)  # type: ignore[arg-type]
    grandchild = _read_pid(child.stdout)
    try:
        child.kill()  # SIGKILL: no chance to stop what it started
        child.wait(5)
        assert is_running(grandchild), "the grandchild died by itself: this test shows nothing"
        kill_leftovers(child)
        assert _gone_within(grandchild, 5)
        kill_leftovers(child)  # nothing left: no error
    finally:
        if is_running(grandchild):
            os.kill(grandchild, signal.SIGKILL)
        child.stdout.close()  # type: ignore[union-attr]


# A supervisor that starts a child the way `fairway up` does, the child running the same
# first step as every `fairway` process, then printing its pid (to the supervisor's stdout).
_SUPERVISOR = (
    "import os, sys, time\n"
    "from service.cli.child_processes import start_child\n"
    "start_child([sys.executable, '-c', 'from service.cli.child_processes import "
    "die_with_supervisor; die_with_supervisor(); import os, time; "
    "print(os.getpid(), flush=True); time.sleep(60)'], dict(os.environ))\n"
    "time.sleep(60)\n"
)


def test_a_child_dies_with_its_supervisor_even_one_killed_outright():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    supervisor = subprocess.Popen([sys.executable, "-c", _SUPERVISOR], env=env,
                                  stdout=subprocess.PIPE)
    child = _read_pid(supervisor.stdout)  # printed after its prctl
    try:
        assert is_running(child)
        supervisor.kill()
        supervisor.wait(5)
        assert _gone_within(child, 10)
    finally:
        if is_running(child):
            os.kill(child, signal.SIGKILL)
        supervisor.stdout.close()  # type: ignore[union-attr]
