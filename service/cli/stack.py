"""`fairway up`: API, dispatcher and worker as child processes, supervised; Ctrl-C stops all."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

from redis import Redis

from service.cli.bootstrap import ensure_demo_key
from service.cli.embedded import EmbeddedServers, child_env
from service.store.keys import WORKER_KEY_PATTERN
from service.store.migrate import upgrade
from service.store.settings import Settings
from service.store.telemetry.logs import configure_logging

ROLES = ("api", "scheduler", "worker")


def _spawn(role: str, env: dict[str, str], settings: Settings) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "service.cli.main", role]
    if role == "worker":
        cmd += ["--engine", settings.engine.kind]
    if role == "api":
        cmd += ["--port", str(settings.api.port)]
    return subprocess.Popen(cmd, env=env)


def _wait_ready(settings: Settings, redis_url: str, procs: dict[str, subprocess.Popen[bytes]],
                timeout_s: float = 900.0) -> None:
    base = f"http://{settings.api.host}:{settings.api.port}"
    redis = Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout_s
    api_up = worker_up = False
    print("waiting for the API and a worker (the engine loads in about a minute) ...",
          flush=True)
    while time.monotonic() < deadline and not (api_up and worker_up):
        for role, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{role} exited with code {proc.returncode} during start-up")
        if not api_up:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as resp:
                    api_up = resp.status == 200
            except OSError:
                pass
        worker_up = worker_up or any(True for _ in redis.scan_iter(match=WORKER_KEY_PATTERN))
        time.sleep(0.5)
    if not (api_up and worker_up):
        raise RuntimeError("the stack did not become ready in time")


def serve_stack(settings: Settings) -> int:
    configure_logging(settings.logging.level)
    servers = EmbeddedServers(settings.data_dir)
    servers.start(need_db=not settings.database_url, need_redis=not settings.redis_url)
    db_url = settings.database_url or servers.database_url
    redis_url = settings.redis_url or servers.redis_url
    settings = settings.with_changes(database_url=db_url, redis_url=redis_url)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    try:
        upgrade(db_url)
        key = ensure_demo_key(settings)
        env = child_env(db_url, redis_url)
        procs = {role: _spawn(role, env, settings) for role in ROLES}
        _wait_ready(settings, redis_url, procs)
        base = f"http://{settings.api.host}:{settings.api.port}/v1"
        model = settings.engine.served_model_name
        print(json.dumps({"base_url": base, "api_key": key, "model": model}, indent=2))
        print(f"try:  OPENAI_BASE_URL={base} OPENAI_API_KEY={key} python -c \"import openai; "
              f"print(openai.OpenAI().chat.completions.create(model='{model}',"
              f" messages=[{{'role':'user','content':'Hi'}}]).choices[0].message.content)\"")
        print("Ctrl-C stops everything.", flush=True)
        restarts = Restarts()
        while not stopping:
            for role, proc in list(procs.items()):
                if proc.poll() is None:
                    restarts.running(role)
                elif restarts.due(role):
                    print(f"{role} exited with code {proc.returncode}; restarting "
                          f"(restart {restarts.count[role]})", flush=True)
                    procs[role] = _spawn(role, env, settings)
            time.sleep(0.5)
    except RuntimeError as exc:
        print(f"fairway up: {exc}", file=sys.stderr)
        code = 1
    finally:
        _terminate(procs)
        servers.stop()
    return code


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


def _terminate(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
