"""`fairway up`: API, dispatcher and worker as child processes, supervised; Ctrl-C stops all.

It prints one short banner (the API base URL, the demo key, the dashboard, the admin token,
where the logs are) and records the running stack in its data directory (`service.cli.state`),
where the other commands find it. The children's output goes to ``logs/<role>.log`` there
(`fairway logs`), or to the terminal with ``--verbose``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from redis import Redis

from service.cli.bootstrap import demo_key
from service.cli.child_processes import kill_leftovers, start_child
from service.cli.demo_plan import demo_plan_line
from service.cli.embedded import EmbeddedServers, child_env
from service.cli.errors import CLIError
from service.cli.state import (
    ADMIN_TOKEN_FILE,
    DEMO_KEY_FILE,
    StackState,
    data_dir_admin_token,
    forget_stack,
    logs_dir,
    running_stack,
)
from service.store.keys import WORKER_KEY_PATTERN
from service.store.migrate import upgrade
from service.store.settings import DEV_ADMIN_TOKEN, Settings
from service.store.telemetry.logs import configure_logging

ROLES = ("api", "scheduler", "worker")


class Children:
    """Starts the children, their output to a log file each (appended, so a restarted child
    continues its file) or, verbose, to this terminal."""

    def __init__(self, settings: Settings, env: dict[str, str], *, verbose: bool) -> None:
        self.settings, self.env, self.verbose = settings, env, verbose
        self.logs = logs_dir(settings.data_dir)
        self._files: list[IO[bytes]] = []

    def spawn(self, role: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "service.cli.main", role]
        if role == "worker":
            cmd += ["--engine", self.settings.engine.kind]
        if role == "api":
            cmd += ["--port", str(self.settings.api.port)]
        if self.verbose:
            return start_child(cmd, self.env)
        self.logs.mkdir(parents=True, exist_ok=True)
        out = open(self.logs / f"{role}.log", "ab")  # noqa: SIM115  # closed in close()
        self._files.append(out)
        return start_child(cmd, self.env, stdout=out)

    def close(self) -> None:
        for fh in self._files:
            fh.close()


def _wait_ready(settings: Settings, redis_url: str, procs: dict[str, subprocess.Popen[bytes]],
                stopping: Callable[[], bool], timeout_s: float = 900.0) -> bool:
    """True once the API answers and a worker beats; False if Ctrl-C came first."""
    base = f"http://{settings.api.host}:{settings.api.port}"
    redis = Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout_s
    api_up = worker_up = False
    loading = ("" if settings.engine.kind == "sim"
               else " (the engine loads its model, about a minute the first time)")
    print(f"starting the API, the scheduler and a worker{loading} ...", flush=True)
    while time.monotonic() < deadline and not (api_up and worker_up):
        if stopping():
            return False
        for role, proc in procs.items():
            if proc.poll() is not None:
                raise CLIError(f"the {role} exited with code {proc.returncode} while starting; "
                               f"see {logs_dir(settings.data_dir) / (role + '.log')}")
        if not api_up:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as resp:
                    api_up = resp.status == 200
            except OSError:
                pass
        worker_up = worker_up or any(True for _ in redis.scan_iter(match=WORKER_KEY_PATTERN))
        time.sleep(0.5)
    if not (api_up and worker_up):
        raise CLIError("the stack did not become ready in time; see the logs in "
                       f"{logs_dir(settings.data_dir)}")
    return True


def admin_token_for(settings: Settings) -> tuple[str, bool]:
    """(the admin token, whether it is this data directory's own): a configured
    FAIRWAY_ADMIN_TOKEN wins; in development the default one is replaced by one made for the
    data directory, so no two installs share a known credential."""
    if settings.admin_token != DEV_ADMIN_TOKEN or "FAIRWAY_ADMIN_TOKEN" in os.environ:
        return settings.admin_token, False
    return data_dir_admin_token(settings.data_dir), True


def _shown(path: Path) -> str:
    """A path as a person reads it: under the home directory, from ~."""
    try:
        return "~/" + str(path.resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(path)


def banner(settings: Settings, *, api_url: str, key: str, admin_token: str,
           token_is_own: bool, verbose: bool, plan_line: str | None = None) -> str:
    data = settings.data_dir
    engine = "simulated engine" if settings.engine.kind == "sim" else "vLLM engine"
    token_note = (f"(kept in {_shown(data / ADMIN_TOKEN_FILE)})" if token_is_own
                  else "(FAIRWAY_ADMIN_TOKEN)")
    logs = ("here (--verbose)" if verbose else
            f"{_shown(logs_dir(data))}/  (fairway logs api|scheduler|worker)")
    return "\n".join([
        f"Fairway is up: {settings.engine.served_model_name} on the {engine}.",
        f"  API base URL  {api_url}/v1",
        f"  API key       {key}  (tenant demo; kept in {_shown(data / DEMO_KEY_FILE)})",
        *([plan_line] if plan_line else []),
        f"  Dashboard     {api_url}/admin/ui/",
        f"  Admin token   {admin_token}  {token_note}",
        f"  Logs          {logs}",
        "Other fairway commands find this stack by themselves. Ctrl-C stops everything.",
    ])


def serve_stack(settings: Settings, *, verbose: bool = False) -> int:
    configure_logging(settings.logging.level if verbose else "WARNING")
    other = running_stack(settings.data_dir)
    if other is not None:
        raise CLIError(f"a stack is already running from {settings.data_dir} (pid {other.pid}, "
                       f"{other.api_url}); stop it first, or set FAIRWAY_DATA_DIR")
    admin_token, token_is_own = admin_token_for(settings)
    servers = EmbeddedServers(settings.data_dir)
    servers.start(need_db=not settings.database_url, need_redis=not settings.redis_url)
    db_url = settings.database_url or servers.database_url
    redis_url = settings.redis_url or servers.redis_url
    settings = settings.with_changes(database_url=db_url, redis_url=redis_url,
                                     admin_token=admin_token)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    env = {**child_env(db_url, redis_url), "FAIRWAY_ADMIN_TOKEN": admin_token}
    children = Children(settings, env, verbose=verbose)
    try:
        upgrade(db_url)
        key = demo_key(settings, settings.data_dir / DEMO_KEY_FILE)
        procs = {role: children.spawn(role) for role in ROLES}
        if not _wait_ready(settings, redis_url, procs, lambda: stopping):
            return 0
        api_url = f"http://{settings.api.host}:{settings.api.port}"
        StackState(api_url=api_url, database_url=db_url, redis_url=redis_url,
                   admin_token=admin_token, pid=os.getpid()).write(settings.data_dir)
        print(banner(settings, api_url=api_url, key=key, admin_token=admin_token,
                     token_is_own=token_is_own, verbose=verbose,
                     plan_line=demo_plan_line(db_url, engine_kind=settings.engine.kind)),
              flush=True)
        restarts, reaped = Restarts(), set[str]()
        while not stopping:
            for role, proc in list(procs.items()):
                if proc.poll() is None:
                    restarts.running(role)
                elif role not in reaped:  # its engine's processes, say: not left running
                    kill_leftovers(proc)
                    reaped.add(role)
                elif restarts.due(role):
                    reaped.discard(role)
                    print(f"the {role} exited with code {proc.returncode}; restarting it "
                          f"(restart {restarts.count[role]})", flush=True)
                    procs[role] = children.spawn(role)
            time.sleep(0.5)
    finally:
        forget_stack(settings.data_dir)
        _terminate(procs, drain_patience_s(settings))
        children.close()
        servers.stop()
    return 0


class Restarts:
    """When to restart a child that exited: at once the first time, then after a delay that
    doubles up to a minute while it keeps exiting (a crash loop does not spin); a child that
    stays up for a minute starts again from no delay."""

    STABLE_S, MAX_DELAY_S = 60.0, 60.0

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self._exited_at: dict[str, float] = {}
        self._up_since: dict[str, float] = {}

    def running(self, role: str) -> None:
        since = self._up_since.setdefault(role, time.monotonic())
        if time.monotonic() - since > self.STABLE_S:
            self.count[role] = 0

    def due(self, role: str) -> bool:
        now = time.monotonic()
        exited = self._exited_at.setdefault(role, now)
        delay = min(self.MAX_DELAY_S, 0.5 * 2 ** self.count.get(role, 0)) if self.count.get(
            role) else 0.0
        if now - exited < delay:
            return False
        self.count[role] = self.count.get(role, 0) + 1
        self._exited_at.pop(role, None)
        self._up_since.pop(role, None)
        return True


def drain_patience_s(settings: Settings) -> float:
    """How long the children get to drain after SIGTERM (docs/jobs.md "Draining"): the API's
    readiness delay and streams' grace, or the worker's realtime grace and its parks, whichever
    is longer, then a margin for the engine's stop; past it they are killed."""
    api = settings.api.drain_delay_seconds + settings.api.drain_grace_seconds
    return max(api, settings.worker.drain_grace_seconds + 10) + 10


def _terminate(procs: dict[str, subprocess.Popen[bytes]], patience_s: float) -> None:
    """SIGTERM to every child at once, each draining by itself (a stream in flight finishes
    while the worker under it still runs, or parks to resume at the next start)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + patience_s
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kill_leftovers(proc)
