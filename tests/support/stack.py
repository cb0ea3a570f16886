"""Start Fairway's real processes (API, dispatcher, workers) for integration and e2e tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from service.cli.embedded import free_port
from service.store.keys import worker_key
from tests.support.services import (
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, n: int = 60) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])


@dataclass
class Stack:
    database_url: str
    redis_url: str
    env_overrides: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    port: int = 0
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fairway-logs-")))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "FAIRWAY_DATABASE_URL": self.database_url,
            "FAIRWAY_REDIS_URL": self.redis_url,
            "FAIRWAY_ENVIRONMENT": "development",
            "PYTHONPATH": str(REPO),
        })
        env.update(self.env_overrides)
        env.update(extra)
        return env

    def spawn(self, name: str, args: list[str], **env: str) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen([sys.executable, "-m", "service.cli.main", *args],
                                     cwd=REPO, env=self.env(**env), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(name, popen, log_path)
        self.procs[name] = proc
        return proc

    def start_api(self, workers: int = 1) -> None:
        """The API on a free port; ``workers`` processes behind it (`fairway api --workers`)."""
        self.port = free_port()
        self.spawn("api", ["api", "--port", str(self.port), "--workers", str(workers)])
        wait_until(lambda: _http_ok(self.base_url + "/healthz"), 60, "api", self)

    def start_api_replica(self, name: str) -> str:
        """One more API process on a port of its own (behind a balancer, in production):
        its base URL once it is ready."""
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        self.spawn(name, ["api", "--port", str(port)])
        wait_until(lambda: _http_ok(base + "/readyz"), 60, name, self)
        return base

    def start_dispatcher(self, name: str = "scheduler", policy: str = "fairway") -> Proc:
        return self.spawn(name, ["scheduler", "--policy", policy])

    def start_worker(self, worker_id: str, engine: str = "sim", timeout_s: float = 120,
                     **env: str) -> Proc:
        proc = self.spawn(f"worker-{worker_id}",
                          ["worker", "--engine", engine, "--worker-id", worker_id], **env)
        redis = Redis.from_url(self.redis_url)
        wait_until(lambda: redis.exists(worker_key(worker_id)) == 1, timeout_s,
                   f"worker {worker_id}", self)
        return proc

    def engine_idle_since(self, worker_id: str, since: float) -> bool:
        """True once a heartbeat sent after `since` (epoch s) reports an empty engine."""
        beat = self.heartbeat(worker_id) or {}
        return float(beat.get("ts", 0)) > since and beat.get("running") == 0  # type: ignore[arg-type]

    def heartbeat(self, worker_id: str) -> dict[str, object] | None:
        raw = Redis.from_url(self.redis_url).get(worker_key(worker_id))
        return json.loads(raw) if raw else None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.popen.pid, sig)
        proc.popen.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.popen.pid, signal.SIGKILL)
        self.procs.clear()

    def aborted_on_request(self, worker_id: str, job_id: object) -> bool:
        """The worker's log says it aborted this job when told to (a cancel's abort command),
        rather than finding out at its next lease renewal."""
        log = self.procs[f"worker-{worker_id}"].log_path.read_text(errors="replace")
        return any('"aborted on request"' in line and str(job_id) in line
                   for line in log.splitlines())

    def logs(self) -> str:
        return "\n".join(f"==== {p.name} ====\n{p.tail()}" for p in self.procs.values())


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def wait_until(check, timeout_s: float, what: str, stack: Stack | None = None,  # type: ignore[no-untyped-def]
               interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if stack is not None:
            for proc in stack.procs.values():
                if proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n"
                                       f"{proc.tail()}")
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}\n{stack.logs() if stack else ''}")


@contextmanager
def own_stack(name: str, env: dict[str, str], *, workers: tuple[str, ...] = (),
              engine: str = "sim", worker_timeout_s: float = 120,
              api_workers: int = 1) -> Iterator[Stack]:
    """A whole stack with its own database, Redis db and files dir, torn down afterwards.

    For modules whose settings (windows, limits, log level) differ from the shared stack's.
    """
    database = create_database(f"fairway_{name}")
    redis = claim_redis_db()
    files = tempfile.mkdtemp(prefix=f"fairway-{name}-files-")
    stack = Stack(database, redis, env_overrides={"FAIRWAY_FILES_DIR": files, **env})
    try:
        stack.start_api(api_workers)
        stack.start_dispatcher()
        for worker_id in workers:
            stack.start_worker(worker_id, engine=engine, timeout_s=worker_timeout_s)
        yield stack
    finally:
        stack.stop()
        drop_database(database)
        release_redis_db(redis)
        shutil.rmtree(files, ignore_errors=True)
