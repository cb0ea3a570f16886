"""The network faults of `fairway chaos --hosts`, and one row each: a host cut from one port of
the db host (a worker from Redis or Postgres, the leader from Postgres), an API replica cut
off the network mid-stream, added latency on a worker's link, random loss on another's. Each
runs under streaming load and a batch; the audit counts what was accepted and what became of
it, and a client whose stream broke fetches its job by id, as a user would."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import httpx

from service.cli.chaos.audit import audit
from service.cli.chaos.batch_client import submit
from service.cli.chaos.cluster import API, DISPATCHERS, WORKERS, Child
from service.cli.chaos.faults import Injected, wait_for
from service.cli.chaos.load import Load, LoadPlan, StreamRecord, Tenant
from service.cli.chaos.probe import time_to_recovery
from service.cli.chaos.report import DETAIL_LIMIT, Row
from service.cli.chaos.run import _busy_worker, _drain, _tenant, longest_gap

if TYPE_CHECKING:
    from service.cli.chaos.hosts import Stage

PG_PORT, REDIS_PORT = 5432, 6379
API_2 = "api-2"  # the second API replica (the first is the one-host stack's ``API``)
HOST_OF = {API: "api1", API_2: "api2", DISPATCHERS[0]: "disp-a", DISPATCHERS[1]: "disp-b",
           WORKERS[0]: "w1", WORKERS[1]: "w2"}
DELAYED_WORKER, LOSSY_WORKER = WORKERS[1], WORKERS[0]
DELAY_MS, LOSS_SHARE = 100, 0.01
PROXIED_PORTS = {REDIS_PORT: 16379, PG_PORT: 15432}  # db port -> the delaying proxy's, on lo
# Run on the delayed host: the median of five Redis PINGs through its proxy, in ms.
ROUND_TRIP = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
took = []
for _ in range(5):
    t = time.perf_counter(); s.sendall(b"PING\\r\\n"); s.recv(64)
    took.append(time.perf_counter() - t)
print(sorted(took)[2] * 1000)
"""

Kind = Literal["cut", "isolate", "delay", "loss"]


@dataclass(frozen=True)
class NetFault:
    kind: Kind
    victim: str  # "worker" (a busy one), "dispatcher" (the active one), "api" (a busy
    # replica) or a fixed child's name
    duration_s: float
    dependency: str = ""  # what a cut is from: "redis" or "postgres" (a port of the db host)

    @property
    def name(self) -> str:
        d = f"{self.duration_s:g}s"
        if self.kind == "cut":
            return f"{self.victim} cut from {self.dependency} {d}"
        if self.kind == "isolate":
            return f"api replica cut off mid-stream {d}"
        if self.kind == "delay":
            return f"{DELAY_MS} ms latency on {HOST_OF[self.victim]}'s link {d}"
        return f"{LOSS_SHARE:.0%} loss on {HOST_OF[self.victim]}'s link {d}"

    @property
    def port(self) -> int:
        return REDIS_PORT if self.dependency == "redis" else PG_PORT

    @property
    def takeover(self) -> bool:
        """Recovery counts from the cut (another host takes over while it lasts), and is held
        to the target; otherwise it counts from the heal and is reported only."""
        return self.victim in ("dispatcher", "api")


def net_faults(short: bool) -> list[NetFault]:
    cut, slow = (6.0, 10.0) if short else (10.0, 20.0)
    return [NetFault("cut", "worker", cut, "redis"),
            NetFault("cut", "worker", cut, "postgres"),
            NetFault("cut", "dispatcher", 10.0 if short else 15.0, "postgres"),
            NetFault("isolate", "api", cut),
            NetFault("delay", DELAYED_WORKER, slow),
            NetFault("loss", LOSSY_WORKER, slow)]


def run_net_fault(fault: NetFault, stage: Stage, plan: LoadPlan) -> Row:
    cluster, url = stage.cluster, stage.db.database_url
    label = f"net-{fault.kind}-{uuid.uuid4().hex[:6]}"
    tenants = [_tenant(url, f"chaos-{label}-{i}") for i in range(2)]
    probe = _tenant(url, f"chaos-{label}-probe")
    tenant_ids = [uuid.UUID(t.id) for t in (*tenants, probe)]
    exits_before = len(cluster.exits)
    load = Load(cluster.base_url, tenants, plan, label)
    load.start()
    batch = submit(cluster.base_url, tenants[0], label, plan.batch_lines, plan.batch_max_tokens)
    time.sleep(2.5)
    victim = _pick_victim(fault, stage, tenant_ids, load)
    link_before = _link_reading(fault, stage, victim)
    hit, cut_at = time.monotonic(), time.time()
    _inject(fault, stage, victim)
    recovery: float | None = None
    try:
        if fault.takeover:
            if fault.victim == "dispatcher":
                wait_for(lambda: _other(cluster.active_dispatcher(), victim), 60.0)
            recovery = time_to_recovery(cluster.base_url, probe, hit, 60.0)
        time.sleep(max(0.0, fault.duration_s - (time.monotonic() - hit) - 0.5))
        link = _link_note(fault, stage, victim, link_before)
        time.sleep(max(0.0, fault.duration_s - (time.monotonic() - hit)))
    finally:
        _heal(fault, stage, victim)
    over, healed_at = time.monotonic(), time.time()
    if not fault.takeover:
        recovery = time_to_recovery(cluster.base_url, probe, over, 60.0)
    back = victim_back(fault, stage, victim, cut_at, healed_at)
    time.sleep(3.0)
    load.stop()
    _drain(cluster, url, tenant_ids, tenants[0], batch, 120.0)
    found = audit(url, cluster.redis, tenant_ids, load, batch)
    refetched, unfinished = refetch_broken(cluster.base_url, tenants, load.streams, hit)
    found.lost += unfinished
    exits = cluster.exits[exits_before:]
    injected = Injected(victim, hit, over)
    details = {"lost": found.lost, "duplicated": found.duplicated,
               "truncated": found.truncated, "client_errors": found.error_samples,
               "quota_held": found.quota_held, "refetched": refetched, "link": link,
               "batch": [f"{batch.batch_id}: {batch.status}, {len(batch.output)} output and "
                         f"{len(batch.errors)} error lines for {len(batch.custom_ids)} sent"],
               "exits": [f"{e.name} exited with code {e.code}:\n{e.tail}" for e in exits],
               "victim_back": [back]}
    return Row(fault=fault.name, victim=victim, accepted=found.accepted,
               lost=len(found.lost), duplicated=len(found.duplicated),
               silent_truncations=len(found.truncated), client_errors=dict(found.errors),
               recovery_s=recovery, token_stall_s=longest_gap(load.streams, injected),
               worker_fault=False, recovery_held=fault.takeover,
               quota_held=len(found.quota_held),
               manual_restarts=[f"{e.name} (exit {e.code})" for e in exits],
               job_ends=dict(found.statuses),
               details={k: v[:DETAIL_LIMIT] for k, v in details.items() if v})


def _pick_victim(fault: NetFault, stage: Stage, tenant_ids: list[uuid.UUID],
                 load: Load) -> str:
    url = stage.db.database_url
    if fault.victim == "worker":
        return wait_for(lambda: _busy_worker(url, tenant_ids), 20.0) or WORKERS[0]
    if fault.victim == "dispatcher":
        return wait_for(stage.cluster.active_dispatcher, 20.0) or DISPATCHERS[0]
    if fault.victim == "api":
        # The replica carrying the most streams already under way (a job id known, text
        # flowing): a cut then breaks work its clients can fetch again by id. On a slow host
        # every stream may still be queued, before its headers; so wait for one.
        chosen = wait_for(lambda: _replica_mid_stream(stage, load), 20.0)
        if chosen:
            return chosen
        sessions = stage.balancer.sessions()
        return max((API, API_2), key=lambda name: sessions.get(name, 0))
    return fault.victim


def _replica_mid_stream(stage: Stage, load: Load) -> str | None:
    ports = stage.balancer.replica_of_client_port()
    counts = Counter(ports[s.client_port] for s in list(load.streams)
                     if s.job_id and s.text and not s.ended and s.client_port in ports)
    return counts.most_common(1)[0][0] if counts else None


def _inject(fault: NetFault, stage: Stage, victim: str) -> None:
    host, fabric = HOST_OF[victim], stage.fabric
    if fault.kind == "cut":
        fabric.cut(host, "db", fault.port)
    elif fault.kind == "isolate":
        fabric.isolate(host)
    elif fault.kind == "delay":
        stage.delay_proxy.send_signal(signal.SIGUSR1)
    else:
        fabric.lossy(host, LOSS_SHARE)


def _heal(fault: NetFault, stage: Stage, victim: str) -> None:
    host, fabric = HOST_OF[victim], stage.fabric
    if fault.kind == "cut":
        fabric.heal(host, "db", fault.port)
    elif fault.kind == "isolate":
        fabric.rejoin(host)
    elif fault.kind == "delay":
        stage.delay_proxy.send_signal(signal.SIGUSR2)
    else:
        fabric.lossless(host, LOSS_SHARE)


def _link_reading(fault: NetFault, stage: Stage, victim: str) -> float:
    """Before a slow or lossy link: the round trip through the proxy, or the packet count."""
    host = HOST_OF[victim]
    if fault.kind == "delay":
        return _round_trip_ms(stage, host)
    if fault.kind == "loss":
        return float(stage.fabric.link_packets(host))
    return 0.0


def _link_note(fault: NetFault, stage: Stage, victim: str, before: float) -> list[str]:
    """What the link showed near the fault's end: proof the fault was in the path."""
    host = HOST_OF[victim]
    if fault.kind == "delay":
        return [f"Redis round trip from {host}: {before:.1f} ms before the fault, "
                f"{_round_trip_ms(stage, host):.1f} ms during it"]
    if fault.kind == "loss":
        dropped_in, dropped_out = stage.fabric.randomly_dropped(host)
        total = stage.fabric.link_packets(host) - int(before) + dropped_out
        dropped = dropped_in + dropped_out
        return [f"{host}'s link dropped {dropped} of {total} packets "
                f"({dropped / max(total, 1):.1%}): {dropped_in} in, {dropped_out} out"]
    return []


def _round_trip_ms(stage: Stage, host: str) -> float:
    ran = stage.fabric.exec(stage.fabric.ns(host), [sys.executable, "-c", ROUND_TRIP,
                                                    str(PROXIED_PORTS[REDIS_PORT])])
    return float(ran.stdout.strip())


def victim_back(fault: NetFault, stage: Stage, victim: str, cut_at: float, healed_at: float,
                timeout_s: float = 60.0) -> str:
    """When the victim was itself again (``*_at``: wall-clock times of the cut and the heal):
    a worker beating again (cut from Postgres: also past its ``postgres back``, if it noticed
    the cut at all); a replica back in the balancer; a cut-off leader knowing it lost the
    lock, which it may learn during the cut (the server's goodbye on its lock's session still
    reaches it) or only after the heal (its loop may wait on a connection whose packets were
    dropped). Until then it still thinks it leads beside the new leader: only the fencing of
    its placements keeps it harmless."""
    cluster = stage.cluster
    child = cluster.children[victim]
    if victim in (API, API_2):
        if wait_for(lambda: "yes" if stage.balancer.up().get(victim) else None, timeout_s):
            return f"{victim}: back in the balancer {time.time() - healed_at:.1f} s after the heal"
        return f"{victim}: not back in the balancer {timeout_s:g} s after the heal"
    if victim in WORKERS:
        if not wait_for(lambda: "yes" if cluster.worker_beating(victim) else None, timeout_s):
            return f"{victim}: not beating {timeout_s:g} s after the heal"
        beating = f"{victim}: beating {time.time() - healed_at:.1f} s after the heal"
        requeued = [r for name in DISPATCHERS for r in _log_records(
            cluster.children[name], f"worker {victim} missed its heartbeats", cut_at)]
        if requeued:  # "worker w missed its heartbeats; re-queued 4 job(s)"
            what = str(requeued[0].get("msg", "")).split("; ", 1)[-1]
            beating += f" (its beats had stopped during the cut: the leader {what})"
        if fault.dependency != "postgres":
            return beating
        moved = {r.get("job_id") for r in _log_records(child, "job no longer ours", cut_at)}
        gave_up = (f"; gave up {len(moved)} job(s) moved to another worker meanwhile "
                   f"(`job no longer ours`)" if moved else "")
        if _logged_at(child, "postgres unavailable", cut_at) is None:
            return f"{beating}; no Postgres call of its failed (they waited){gave_up}"
        at = wait_for(lambda: _logged_at(child, "postgres back", cut_at), timeout_s)
        if at is None:
            return f"{beating}; no `postgres back` {timeout_s:g} s after the heal{gave_up}"
        return f"{beating}; `postgres back` {float(at) - healed_at:.1f} s after the heal{gave_up}"
    at = wait_for(lambda: _logged_at(child, "lost the dispatcher lock", cut_at), timeout_s)
    if at is None:
        return f"{victim}: had not stood down {timeout_s:g} s after the heal"
    when = (f"{float(at) - cut_at:.1f} s into the cut" if float(at) < healed_at
            else f"{float(at) - healed_at:.1f} s after the heal")
    return f"{victim}: stood down (lost the lock) {when}"


def refetch_broken(base_url: str, tenants: list[Tenant], streams: list[StreamRecord],
                   hit: float, timeout_s: float = 30.0) -> tuple[list[str], list[str]]:
    """Each stream that broke after its job was accepted (a transport error, a job id known),
    fetched again by the job's id (``GET /v1/jobs/job_<id>``) as its client would: what came
    back, and the jobs whose result was not there or did not begin with what the stream had
    shown (lost work). ``hit``: when the fault began (time.monotonic())."""
    keys = {t.name: t.key for t in tenants}
    seen, lost = [], []
    broken = [s for s in streams
              if s.job_id and s.error and s.error.startswith("transport")]
    with httpx.Client(base_url=base_url, timeout=10.0) as http:
        for s in broken:
            job = _final_job(http, keys[s.tenant], s.job_id or "", timeout_s)
            status = job.get("status") if job else "unreadable"
            output = (job or {}).get("output")
            text = output.get("text") if isinstance(output, dict) else None
            broke = (f"job {s.job_id}: {s.error} after {len(s.text)} chars, "
                     f"{s.ended - hit:.1f} s after the fault began; by id: ")
            if status == "succeeded" and isinstance(text, str) and text.startswith(s.text):
                seen.append(f"{broke}succeeded, {len(text)} chars, beginning with what it "
                            f"streamed")
            else:
                lost.append(f"{broke}{status}, "
                            f"{len(text) if isinstance(text, str) else 'no'} chars")
    return seen, lost


def _final_job(http: httpx.Client, key: str, job_hex: str,
               timeout_s: float) -> dict[str, object] | None:
    deadline = time.monotonic() + timeout_s
    job: dict[str, object] | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            resp = http.get(f"/v1/jobs/job_{job_hex}", headers={"Authorization": f"Bearer {key}"})
            if resp.status_code == 200:
                job = resp.json()
                if job is not None and job.get("status") in ("succeeded", "failed", "cancelled"):
                    return job
        time.sleep(0.5)
    return job


def _logged_at(child: Child, text: str, since: float) -> str | None:
    """The wall-clock time (as text, for ``wait_for``) of the child's first log line that
    holds ``text``, logged at ``since`` (wall clock) or later."""
    records = _log_records(child, text, since)
    return str(records[0]["at"]) if records else None


def _log_records(child: Child, text: str, since: float) -> list[dict[str, object]]:
    """The child's JSON log lines that hold ``text``, logged at ``since`` (wall clock) or
    later, each with its time as ``at``."""
    try:
        with open(child.log_path, "rb") as log:
            log.seek(child.log_start)
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        if text in line:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                at = dt.datetime.fromisoformat(record["ts"]).timestamp()
                if at >= since:
                    found.append({**record, "at": at})
    return found


def _other(active: str | None, victim: str) -> str | None:
    return active if active in DISPATCHERS and active != victim else None
