"""What the control-plane bench (bench/control_plane.py) measures besides the load itself:
CPU time per process group (psutil) and Postgres writes (pg_stat_* and WAL), as deltas."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg


def tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants, or nothing if it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


@dataclass
class CpuMeter:
    """CPU seconds per named group of process trees between `start` and `stop`.

    A poller thread keeps each pid's latest cpu_times, so a process that starts during the
    window (a new Postgres backend) counts from zero, and one that exits keeps what it had at
    the last poll (up to `interval_s` of its time is lost: pooled connections rarely exit).
    """

    # name -> root pids, looked up at each poll. Trees overlap (the stack's processes are the
    # load generator's children): put the narrower groups first.
    groups: dict[str, Callable[[], list[int]]]
    interval_s: float = 0.5
    _first: dict[int, float] = field(default_factory=dict)
    _last: dict[int, tuple[str, float]] = field(default_factory=dict)
    _box0: psutil._common.scputimes | None = None
    _box1: psutil._common.scputimes | None = None
    _t: tuple[float, float] = (0.0, 0.0)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _poll(self, first: bool = False) -> None:
        seen: set[int] = set()  # a pid counts for the first group whose tree holds it
        for name, roots in self.groups.items():
            for root in roots():
                for proc in tree(root):
                    if proc.pid in seen:
                        continue
                    seen.add(proc.pid)
                    try:
                        t = proc.cpu_times()
                    except psutil.NoSuchProcess:
                        continue
                    used = t.user + t.system
                    if first:
                        self._first[proc.pid] = used
                    self._first.setdefault(proc.pid, 0.0)
                    self._last[proc.pid] = (name, used)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def start(self) -> None:
        self._first.clear()
        self._last.clear()
        self._stop.clear()
        self._poll(first=True)
        self._box0 = psutil.cpu_times()
        self._t = (time.monotonic(), 0.0)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._poll()
        self._box1 = psutil.cpu_times()
        self._t = (self._t[0], time.monotonic())

    @property
    def wall_s(self) -> float:
        return self._t[1] - self._t[0]

    def seconds(self) -> dict[str, float]:
        """CPU seconds per group over the window."""
        out = dict.fromkeys(self.groups, 0.0)
        for pid, (name, used) in self._last.items():
            out[name] += used - self._first[pid]
        return out

    def box_busy_s(self) -> float:
        """CPU seconds the whole box spent busy (every process, ours or not)."""
        assert self._box0 is not None and self._box1 is not None
        busy = lambda t: sum(t) - t.idle - getattr(t, "iowait", 0.0)  # noqa: E731
        return busy(self._box1) - busy(self._box0)


PG_STATS = """
select d.xact_commit, d.tup_inserted, d.tup_updated, d.tup_deleted, d.sessions,
       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint as wal_bytes
from pg_stat_database d where d.datname = current_database()"""

PG_TABLES = """
select relname, n_tup_ins + n_tup_upd + n_tup_del as writes
from pg_stat_user_tables"""


@dataclass(frozen=True)
class PgSnapshot:
    totals: dict[str, int]
    tables: dict[str, int]


def pg_snapshot(database_url: str) -> PgSnapshot:
    """The database's cumulative write counters. Backends flush their counters about once a
    second, so take snapshots while the load runs steadily: the lag cancels out."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        row = conn.execute(PG_STATS).fetchone()
        assert row is not None
        totals = dict(zip(("xact_commit", "tup_inserted", "tup_updated", "tup_deleted",
                           "sessions", "wal_bytes"), (int(v) for v in row), strict=True))
        tables = {str(name): int(n) for name, n in conn.execute(PG_TABLES).fetchall()}
    return PgSnapshot(totals, tables)


def pg_delta(a: PgSnapshot, b: PgSnapshot) -> PgSnapshot:
    return PgSnapshot({k: b.totals[k] - a.totals[k] for k in b.totals},
                      {k: v - a.tables.get(k, 0) for k, v in b.tables.items()})


def redis_calls(redis_url: str) -> dict[str, int]:
    """Cumulative calls per Redis command (INFO commandstats), e.g. {"xadd": 120, ...}."""
    from redis import Redis

    client = Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def pg_settings(database_url: str) -> dict[str, str]:
    names = ("server_version", "synchronous_commit", "fsync", "shared_buffers", "max_connections")
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {n: str(conn.execute(f"show {n}").fetchone()[0])  # type: ignore[index]
                for n in names}
