"""The faults, and how each is injected: a process killed (-9), a dependency stopped for a
while and started again in place, a worker or the active dispatcher frozen (SIGSTOP) and
thawed (SIGCONT)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from service.cli.chaos.cluster import API, DISPATCHERS, WORKERS, Cluster
from service.cli.embedded import EmbeddedServers

Target = Literal["worker", "dispatcher", "api", "redis", "postgres", "fleet"]
Action = Literal["kill", "stop", "freeze", "roll"]


@dataclass(frozen=True)
class Fault:
    target: Target
    action: Action
    duration_s: float = 0.0  # how long a server stays stopped or a worker frozen

    @property
    def name(self) -> str:
        if self.action == "roll":
            return "rolling restart"
        if self.action == "kill":
            return f"kill -9 {self.target}"
        if self.action == "freeze":
            return f"freeze {self.target} {self.duration_s:g}s"
        return f"{self.target} down {self.duration_s:g}s"

    @property
    def slug(self) -> str:
        return self.name.replace("kill -9 ", "kill-").replace(" ", "-")

    @property
    def hits_worker(self) -> bool:
        return self.target == "worker"

    @property
    def recovery_held(self) -> bool:
        """Held to the recovery target: a dependency's outage, or the active dispatcher's
        death or freeze (its standby takes over). A killed API's recovery is its own start-up
        (seconds of imports on a loaded host); a worker fault's is the known issue in
        docs/chaos.md."""
        return self.target in ("redis", "postgres", "dispatcher")

    @property
    def takeover(self) -> bool:
        """Its recovery is the standby's takeover, measured from the freeze while the leader
        stays frozen (its thaw later only tests that it stands down)."""
        return self.target == "dispatcher" and self.action == "freeze"


def all_faults(short: bool) -> list[Fault]:
    """Every fault of the pass; ``short`` shortens the outages (and the freeze, still past
    the 5 s lease so its jobs move) for CI."""
    outages = (3.0, 5.0) if short else (10.0, 60.0)
    return [
        Fault("worker", "kill"),
        Fault("dispatcher", "kill"),
        Fault("api", "kill"),
        *(Fault("redis", "stop", d) for d in outages),
        *(Fault("postgres", "stop", d) for d in outages),
        Fault("worker", "freeze", 8.0 if short else 15.0),
        Fault("dispatcher", "freeze", 9.0 if short else 20.0),
        Fault("fleet", "roll"),
    ]


@dataclass(frozen=True)
class Injected:
    victim: str  # the process or server hit
    hit: float  # time.monotonic() when the fault began
    over: float  # when it ended: the server back, the process killed or thawed
    recovery_s: float | None = None  # a takeover's, measured while the fault held


def inject(fault: Fault, cluster: Cluster, servers: EmbeddedServers,
           busy_worker: Callable[[], str | None],
           recovery: Callable[[float], float | None]) -> Injected:
    """Injects ``fault`` and returns once it is over. ``busy_worker`` names a worker that is
    streaming tokens for this fault's clients right now (None while there is none);
    ``recovery(since)`` measures the time to recovery from ``since`` (time.monotonic()), for
    a fault whose recovery is measured while it holds (``Fault.takeover``)."""
    if fault.target == "redis":
        return _outage("redis", servers.stop_redis, servers.start_redis, fault.duration_s)
    if fault.target == "postgres":
        return _outage("postgres", servers.stop_postgres, servers.start_postgres,
                       fault.duration_s)
    if fault.action == "roll":
        return _roll(cluster)
    if fault.target == "worker":
        victim = wait_for(busy_worker, 20.0) or WORKERS[0]
    elif fault.target == "dispatcher":
        found = wait_for(cluster.active_dispatcher, 20.0)
        if found is None:
            raise RuntimeError("no active dispatcher to kill")
        victim = found
    else:
        victim = API
    hit = time.monotonic()
    if fault.takeover:
        return _freeze_leader(victim, cluster, fault.duration_s, recovery)
    if fault.action == "freeze":
        cluster.freeze(victim)
        time.sleep(fault.duration_s)
        cluster.thaw(victim)
    else:
        cluster.kill(victim)
    return Injected(victim, hit, time.monotonic())


def _freeze_leader(victim: str, cluster: Cluster, duration_s: float,
                   recovery: Callable[[float], float | None]) -> Injected:
    """Freezes the active dispatcher, with its standby running: the time to recovery counts from
    the freeze, once the standby leads (its leader beat names it: until then a request could
    still pass on express tickets lent before the freeze, with no dispatcher at all). The
    leader stays frozen for ``duration_s`` in all, then resumes and must stand down."""
    hit = time.monotonic()
    cluster.freeze(victim)
    try:
        standby = wait_for(lambda: _other_leader(cluster, victim), 60.0)
        took = recovery(hit) if standby is not None else None
        time.sleep(max(0.0, duration_s - (time.monotonic() - hit)))
    finally:
        cluster.thaw(victim)
    return Injected(victim, hit, time.monotonic(), recovery_s=took)


def _roll(cluster: Cluster) -> Injected:
    """A rolling restart under the load: every worker, then the API, then both dispatchers
    (the standby first, so the lock changes hands once), one at a time, each sent SIGTERM,
    its drain waited out and started again before the next (``Cluster.restart``)."""
    hit = time.monotonic()
    active = cluster.active_dispatcher()
    dispatchers = sorted(DISPATCHERS, key=lambda name: name == active)
    for name in (*WORKERS, API, *dispatchers):
        cluster.restart(name)
    return Injected("every process, one by one", hit, time.monotonic())


def _other_leader(cluster: Cluster, victim: str) -> str | None:
    active = cluster.active_dispatcher()
    return active if active in DISPATCHERS and active != victim else None


def _outage(name: str, stop: Callable[[], None], start: Callable[[], None],
            duration_s: float) -> Injected:
    hit = time.monotonic()
    stop()
    time.sleep(max(0.0, duration_s - (time.monotonic() - hit)))
    start()
    return Injected(name, hit, time.monotonic())


def wait_for(find: Callable[[], str | None], timeout_s: float) -> str | None:
    """What ``find`` returns first within ``timeout_s`` (polled every 0.1 s), or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find()
        if found is not None:
            return found
        time.sleep(0.1)
    return None
