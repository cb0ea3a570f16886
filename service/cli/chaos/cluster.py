"""The stack under test, as child processes an operator would run: one API, two dispatchers (one
active, one standby) and two sim-engine workers, each `python -m service.cli.main <role>`, on the
private servers. The harness also plays their supervisor: it kills, freezes and restarts them,
and notices a child that exited on its own (which no fault should cause)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

import service
from service.cli.embedded import free_port
from service.store.heartbeats import LeaderBeat
from service.store.keys import LEADER_KEY, worker_key

SOURCE_ROOT = Path(service.__file__).resolve().parents[1]  # children import this same code
MODEL = "sim-model"
API, DISPATCHERS, WORKERS = "api", ("dispatcher-a", "dispatcher-b"), ("worker-1", "worker-2")


# Heartbeats and leases short enough that a dead worker's jobs move within seconds.
SHORT_TIMINGS = {"FAIRWAY_HEARTBEAT_SECONDS": "0.5", "FAIRWAY_LEASE_SECONDS": "5"}


def stack_env(database_url: str, redis_url: str, data_dir: Path,
              default_timings: bool = False) -> dict[str, str]:
    """The children's settings: private servers, and ``SHORT_TIMINGS`` unless
    ``default_timings`` (the product's own heartbeat and lease, to measure them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRWAY_")}
    env.update({} if default_timings else SHORT_TIMINGS)
    env.update({
        "FAIRWAY_DATABASE_URL": database_url, "FAIRWAY_REDIS_URL": redis_url,
        "FAIRWAY_DATA_DIR": str(data_dir), "FAIRWAY_FILES_DIR": str(data_dir / "files"),
        "FAIRWAY_ENVIRONMENT": "development", "FAIRWAY_SERVED_MODEL_NAME": MODEL,
        "FAIRWAY_ENGINE": "sim", "FAIRWAY_MAX_NUM_SEQS": "16",
        "FAIRWAY_BATCH_VALIDATION_GRACE_SECONDS": "5",
        "PYTHONPATH": os.pathsep.join(p for p in (str(SOURCE_ROOT),
                                                  os.environ.get("PYTHONPATH")) if p),
    })
    return env


@dataclass
class Child:
    name: str
    args: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    killed: bool = False  # by the harness: its exit is the fault, not a defect
    log_start: int = 0  # its log's size when it started (the log is shared by restarts)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def logged_since_start(self, text: str) -> bool:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_start)
                return text.encode() in log.read()
        except OSError:
            return False

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


@dataclass(frozen=True)
class Exit:
    """A child that exited without being killed: an operator would have had to restart it."""

    name: str
    code: int
    at: float  # time.monotonic()
    tail: str


@dataclass
class Cluster:
    env: dict[str, str]
    log_dir: Path
    port: int = field(default_factory=free_port)
    children: dict[str, Child] = field(default_factory=dict)
    exits: list[Exit] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)  # name -> harness restarts
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @functools.cached_property
    def redis(self) -> Redis:
        return Redis.from_url(self.env["FAIRWAY_REDIS_URL"], socket_timeout=2,
                              socket_connect_timeout=2)

    # -- start and stop ------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(API, ["api", "--port", str(self.port)])
        self._spawn(DISPATCHERS[0], ["scheduler"])
        for worker in WORKERS:
            self._spawn(worker, ["worker", "--engine", "sim", "--worker-id", worker])
        self.wait_until(self.api_healthy, timeout_s, "the API")
        self.wait_until(lambda: self.active_dispatcher() == DISPATCHERS[0], timeout_s,
                        "the first dispatcher to lead")
        self._spawn(DISPATCHERS[1], ["scheduler"])  # second: it stands by
        for worker in WORKERS:
            self.wait_until(functools.partial(self.worker_beating, worker), timeout_s, worker)
        self.wait_until(self.ready, timeout_s, "readiness")
        self._watcher = threading.Thread(target=self._watch, name="chaos-supervisor",
                                         daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        with self._lock:
            children = list(self.children.values())
        for child in children:
            _signal(child, signal.SIGCONT)  # a frozen child cannot act on SIGTERM
            _signal(child, signal.SIGTERM)
        for child in children:
            try:
                child.popen.wait(20)
            except subprocess.TimeoutExpired:
                _signal(child, signal.SIGKILL)
                child.popen.wait(5)

    def _spawn(self, name: str, args: list[str]) -> Child:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            start = log.tell()
            popen = subprocess.Popen([sys.executable, "-m", "service.cli.main", *args],
                                     cwd=SOURCE_ROOT, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        child = Child(name, args, popen, log_path, log_start=start)
        with self._lock:
            self.children[name] = child
        return child

    # -- faults --------------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        """kill -9; the supervisor (``_watch``) starts it again at once, as `fairway up` does."""
        child = self.children[name]
        child.killed = True
        _signal(child, signal.SIGKILL)
        child.popen.wait(30)

    def restart(self, name: str, timeout_s: float = 180.0) -> None:
        """SIGTERM, as an orchestrator's rolling restart sends: the child drains and exits
        (a code other than 0 is recorded in ``exits``, as a defect), the supervisor starts it
        again, and this returns once the new process is back (a worker beating, the API
        healthy, a dispatcher leading or standing by)."""
        old = self.children[name]
        old.killed = True  # its exit is the harness's doing; the supervisor restarts it
        _signal(old, signal.SIGTERM)
        code = old.popen.wait(timeout_s)
        if code != 0:
            self.exits.append(Exit(name, code, time.monotonic(), old.tail()))
        self.wait_until(lambda: self.children.get(name) is not old, 10, f"{name} restarted")
        self.wait_until(functools.partial(self._back, self.children[name]), timeout_s,
                        f"{name} back")

    def _back(self, child: Child) -> bool:
        if child.name == API:
            return self.api_healthy()
        if child.name in DISPATCHERS:
            return (child.logged_since_start("standing by")
                    or child.logged_since_start("acquired the dispatcher lock"))
        return self.worker_beating(child.name)  # the old one deleted its beat as it left

    def freeze(self, name: str) -> None:
        _signal(self.children[name], signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        _signal(self.children[name], signal.SIGCONT)

    def _watch(self) -> None:
        """The supervisor: restart every child that exited. One the harness killed is the
        fault; one that exited by itself is recorded in ``exits`` (a manual restart)."""
        while not self._stop.wait(0.2):
            with self._lock:
                ended = [c for c in self.children.values() if c.popen.poll() is not None]
            for child in ended:
                if self._stop.is_set():
                    return
                if not child.killed:
                    self.exits.append(Exit(child.name, child.popen.returncode,
                                           time.monotonic(), child.tail()))
                self.restarts[child.name] = self.restarts.get(child.name, 0) + 1
                self._spawn(child.name, child.args)

    # -- state ---------------------------------------------------------------------------------
    def api_healthy(self) -> bool:
        return _http_status(self.base_url + "/healthz") == 200

    def ready(self) -> bool:
        return _http_status(self.base_url + "/readyz") == 200

    def worker_beating(self, worker: str) -> bool:
        try:
            return bool(self.redis.exists(worker_key(worker)))
        except Exception:
            return False

    def active_dispatcher(self) -> str | None:
        """The child whose process holds the dispatcher lock (its leader beat names it)."""
        try:
            beat = LeaderBeat.decode(self.redis.get(LEADER_KEY))
        except Exception:
            return None
        if beat is None:
            return None
        pid = beat.dispatcher.rsplit("-", 1)[-1]
        with self._lock:
            for name in DISPATCHERS:
                child = self.children.get(name)
                if child is not None and str(child.pid) == pid and child.popen.poll() is None:
                    return name
        return None

    def wait_until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            with self._lock:
                dead = [c for c in self.children.values()
                        if c.popen.poll() is not None and not c.killed]
            if dead and self._watcher is None:  # still starting: nobody restarts it
                raise RuntimeError(f"{dead[0].name} exited while waiting for {what}:\n"
                                   f"{dead[0].tail()}")
            time.sleep(0.1)
        raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _signal(child: Child, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, sig)


def _http_status(url: str, timeout_s: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None
