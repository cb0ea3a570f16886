"""A chaos pass: private servers, the stack on them, then each fault in turn under fresh load,
each followed by a drain and an audit that make one row of the report."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from service.cli.bootstrap import create_tenant_with_key
from service.cli.chaos.audit import active_jobs, audit
from service.cli.chaos.batch_client import BatchRecord, collect, submit
from service.cli.chaos.cluster import Cluster, stack_env
from service.cli.chaos.faults import Fault, Injected, all_faults, inject
from service.cli.chaos.load import Load, LoadPlan, StreamRecord, Tenant
from service.cli.chaos.probe import time_to_recovery
from service.cli.chaos.report import DETAIL_LIMIT, Row, Targets
from service.cli.embedded import EmbeddedServers
from service.store.db import sync_session
from service.store.migrate import upgrade
from service.store.models.jobs import Job
from service.store.settings import Settings

log = logging.getLogger("fairway.chaos")


@dataclass(frozen=True)
class PassPlan:
    faults: list[Fault]
    load: LoadPlan
    warmup_s: float  # load before the fault
    after_s: float  # load after recovery
    recovery_timeout_s: float
    drain_s: float  # for the fault's jobs and batch to end
    targets: Targets = field(default_factory=Targets)
    default_timings: bool = False  # the product's heartbeat and lease, not the harness's

    @staticmethod
    def full() -> PassPlan:
        return PassPlan(all_faults(short=False), LoadPlan(), warmup_s=4.0, after_s=5.0,
                        recovery_timeout_s=120.0, drain_s=240.0)

    @staticmethod
    def short() -> PassPlan:
        return PassPlan(all_faults(short=True),
                        LoadPlan(streams=4, calls=1, stream_max_tokens=48, call_max_tokens=16,
                                 batch_lines=100, batch_max_tokens=12, read_timeout_s=45.0),
                        warmup_s=2.5, after_s=1.5, recovery_timeout_s=30.0, drain_s=90.0)


def run_pass(plan: PassPlan, data_dir: Path, say: Callable[[str], None] = print) -> list[Row]:
    """Runs every fault of ``plan`` on a stack over private servers under ``data_dir``."""
    servers = EmbeddedServers(data_dir)
    servers.start(need_db=True, need_redis=True)
    cluster: Cluster | None = None
    try:
        upgrade(servers.database_url)
        cluster = Cluster(stack_env(servers.database_url, servers.redis_url, data_dir,
                                    plan.default_timings), data_dir / "logs")
        say(f"starting the stack (logs in {cluster.log_dir}) ...")
        cluster.start()
        rows = []
        for fault in plan.faults:
            say(f"fault: {fault.name} ...")
            row = run_fault(fault, plan, cluster, servers)
            say(f"  accepted {row.accepted}, lost {row.lost}, duplicated {row.duplicated}, "
                f"silent truncations {row.silent_truncations}, recovery "
                f"{row.recovery_s if row.recovery_s is None else round(row.recovery_s, 1)} s")
            rows.append(row)
        return rows
    finally:
        if cluster is not None:
            cluster.stop()
        servers.stop()


def run_fault(fault: Fault, plan: PassPlan, cluster: Cluster,
              servers: EmbeddedServers) -> Row:
    db = servers.database_url
    label = f"{fault.slug}-{uuid.uuid4().hex[:6]}"
    tenants = [_tenant(db, f"chaos-{label}-{i}") for i in range(3)]
    probe = _tenant(db, f"chaos-{label}-probe")
    tenant_ids = [uuid.UUID(t.id) for t in (*tenants, probe)]
    exits_before, restarts_before = len(cluster.exits), dict(cluster.restarts)

    load = Load(cluster.base_url, tenants, plan.load, label)
    load.start()
    batch = submit(cluster.base_url, tenants[0], label, plan.load.batch_lines,
                   plan.load.batch_max_tokens)
    time.sleep(plan.warmup_s)
    def recovery_since(since: float) -> float | None:
        return time_to_recovery(cluster.base_url, probe, since, plan.recovery_timeout_s)

    injected = inject(fault, cluster, servers, lambda: _busy_worker(db, tenant_ids),
                      recovery_since)
    recovery = injected.recovery_s if fault.takeover else recovery_since(injected.over)
    time.sleep(plan.after_s)
    load.stop()
    _drain(cluster, db, tenant_ids, tenants[0], batch, plan.drain_s)

    found = audit(db, cluster.redis, tenant_ids, load, batch)
    exits = cluster.exits[exits_before:]
    restarted = [f"{name} x{n - restarts_before.get(name, 0)}"
                 for name, n in cluster.restarts.items() if n > restarts_before.get(name, 0)]
    details = {"lost": found.lost, "duplicated": found.duplicated,
               "truncated": found.truncated, "client_errors": found.error_samples,
               "quota_held": found.quota_held,
               "exits": [f"{e.name} exited with code {e.code}:\n{e.tail}" for e in exits]}
    return Row(fault=fault.name, victim=injected.victim, accepted=found.accepted,
               lost=len(found.lost), duplicated=len(found.duplicated),
               silent_truncations=len(found.truncated), client_errors=dict(found.errors),
               recovery_s=recovery, token_stall_s=(
                   longest_gap(load.streams, injected) if fault.action == "roll"
                   else token_stall(load.streams, injected)),
               ttft_p99_before_s=ttft_p99(load.streams, 0.0, injected.hit),
               ttft_p99_during_s=ttft_p99(load.streams, injected.hit, injected.over),
               worker_fault=fault.hits_worker, recovery_held=fault.recovery_held,
               quota_held=len(found.quota_held),
               manual_restarts=[f"{e.name} (exit {e.code})" for e in exits],
               supervisor_restarts=restarted, job_ends=dict(found.statuses),
               details={k: v[:DETAIL_LIMIT] for k, v in details.items() if v})


def token_stall(streams: list[StreamRecord], injected: Injected) -> float | None:
    """The longest time a stream in flight when the fault hit went without a token (or its
    end) across the fault; None when no stream was in flight."""
    longest: float | None = None
    for s in streams:
        if s.started > injected.hit or (s.ended and s.ended < injected.hit):
            continue
        before = max((t for t in s.events if t <= injected.hit), default=s.started)
        after = min((t for t in s.events if t > injected.hit), default=s.ended or None)
        if after is None:
            continue
        longest = max(longest or 0.0, after - before)
    return longest


def longest_gap(streams: list[StreamRecord], injected: Injected) -> float | None:
    """For a fault that lasts (the rolling restart): the longest time a stream went without a
    token (or its end), over the gaps that overlap the fault; None when no stream was in
    flight then."""
    longest: float | None = None
    for s in streams:
        if s.started > injected.over or (s.ended and s.ended < injected.hit):
            continue
        for before, after in itertools.pairwise(s.events):  # between tokens: TTFT aside
            if after >= injected.hit and before <= injected.over:
                longest = max(longest or 0.0, after - before)
    return longest


def ttft_p99(streams: list[StreamRecord], start: float, end: float) -> float | None:
    """The 99th percentile time to first token of the streams started in [start, end) that
    got one; None when there were none."""
    ttfts = sorted(s.events[0] - s.started for s in streams
                   if start <= s.started < end and s.status == 200 and s.events)
    return ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else None


def _tenant(database_url: str, name: str) -> Tenant:
    tenant_id, key = create_tenant_with_key(Settings(database_url=database_url), name)
    return Tenant(name, str(tenant_id), key)


def _busy_worker(database_url: str, tenant_ids: list[uuid.UUID]) -> str | None:
    """A worker streaming tokens to this fault's clients right now."""
    try:
        with sync_session(database_url) as session:
            return session.scalar(select(Job.worker_id).where(
                Job.tenant_id.in_(tenant_ids), Job.status == "running",
                Job.batch_id.is_(None), Job.stream.is_(True),
                Job.first_token_at.is_not(None)).limit(1))
    except Exception:
        return None


def _drain(cluster: Cluster, database_url: str, tenant_ids: list[uuid.UUID],
           batch_tenant: Tenant, batch: BatchRecord, timeout_s: float) -> None:
    """Waits (up to ``timeout_s``) for the batch and every job of the fault to end."""
    deadline = time.monotonic() + timeout_s
    collect(cluster.base_url, batch_tenant, batch, timeout_s)
    while time.monotonic() < deadline:
        try:
            if active_jobs(database_url, tenant_ids) == 0:
                return
        except Exception:
            pass
        time.sleep(0.5)
