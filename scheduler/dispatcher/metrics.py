"""What the dispatcher exports: decision latency and counts per pass, and, refreshed from its
maintenance every few seconds, its queue/placement/worker gauges, the policy's fair-share
counters, jobs and batches by status and queued jobs by tenant and tier from Postgres
(indexed queries on open rows only), the plans' SLO targets, and, every FAIRNESS_REFRESH_S,
fairness per class and each tenant's service and queue wait over the last
FAIRNESS_WINDOW_S (service.store.telemetry.fairness); and, every AUTOSCALE_REFRESH_S, each
model's desired workers and its inputs (scheduler.dispatcher.autoscale_feed)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from sqlalchemy import text

from scheduler.autoscale import REASONS, AutoscaleConfig, Desired
from scheduler.dispatcher import autoscale_feed
from service.store.db import sync_session
from service.store.fairness_window import WINDOW_SQL, tenant_services, window_params
from service.store.lifecycle import ACTIVE
from service.store.models.jobs import JobStatus
from service.store.telemetry import metrics as m
from service.store.telemetry.fairness import ClassFairness, fairness_by_class
from service.store.telemetry.labels import class_label, tenant_label, tier_label
from service.store.telemetry.state import enabled

REFRESH_S = 2.0
FAIRNESS_REFRESH_S = 10.0
FAIRNESS_WINDOW_S = 300.0
AUTOSCALE_REFRESH_S = 5.0
# Bounds are KEDA's (its min and max replicas); this only keeps a runaway count readable.
AUTOSCALE = AutoscaleConfig(min_workers=0, max_workers=1024)
OPEN_JOB_STATUSES = tuple(s.value for s in JobStatus if s in ACTIVE)
OPEN_BATCH_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")

_JOBS_SQL = text("SELECT status, kind, count(*) FROM jobs "
                 "WHERE status IN ('queued', 'assigned', 'running') GROUP BY status, kind")
_BATCHES_SQL = text("SELECT status, count(*) FROM batches WHERE status IN "
                    "('validating', 'in_progress', 'finalizing', 'cancelling') GROUP BY status")
_BATCH_LINES_SQL = text(
    "SELECT b.tenant_id, j.status, count(*) FROM batches b JOIN jobs j ON j.batch_id = b.id "
    "WHERE b.status IN ('in_progress', 'finalizing', 'cancelling') "
    "GROUP BY b.tenant_id, j.status")

_QUEUED_SQL = text("SELECT tenant_id, kind, service_tier, count(*) FROM jobs "
                   "WHERE status = 'queued' GROUP BY tenant_id, kind, service_tier")
_TARGETS_SQL = text("SELECT name, ttft_slo_ms, tpot_slo_ms FROM tiers")

_next_refresh = 0.0
_next_fairness = 0.0
_next_autoscale = 0.0
_autoscale_models: set[str] = set()  # every model exported so far: an idle one reads 0
_desired_seen: set[tuple[str, str]] = set()  # (model, reason) series exported
_autoscale_reader = autoscale_feed.Reader()


def observe_pass(seconds: float, decisions: list[Any]) -> None:
    if not enabled():
        return
    m.DECISION_SECONDS.observe(seconds)
    for decision in decisions:
        m.DECISIONS.labels(type(decision).__name__.lower()).inc()


def observe_express_placed() -> None:
    """A job the API placed with a lent ticket, booked by the dispatcher: the assignment the
    policy made ahead of time (docs/jobs.md, "The express path")."""
    if enabled():
        m.DECISIONS.labels("express").inc()


def set_leader(is_leader: bool) -> None:
    if enabled():
        m.SCHED_LEADER.set(1 if is_leader else 0)


def refresh(dispatcher: Any, *, force: bool = False) -> None:
    """Called from the dispatcher's maintenance; does its work at most every REFRESH_S."""
    global _next_refresh
    if not enabled() or (not force and time.monotonic() < _next_refresh):
        return
    _next_refresh = time.monotonic() + REFRESH_S
    policy = dispatcher.policy
    m.SCHED_QUEUED.set(policy.num_queued())
    placed = {"realtime": 0, "batch": 0}
    for _, job_class in dispatcher.placed.values():
        placed[str(job_class)] = placed.get(str(job_class), 0) + 1
    for job_class, n in placed.items():
        m.SCHED_PLACED.labels(job_class).set(n)
    m.SCHED_WORKERS.set(len(dispatcher.workers))
    for level, counters in enumerate(getattr(policy, "counters", None) or ()):
        for tenant, value in dict(getattr(counters, "counters", {})).items():
            m.FAIR_SHARE.labels(tenant_label(tenant), str(level)).set(value)
    with sync_session(dispatcher.settings.database_url) as session:
        jobs = {(s, k): n for s, k, n in session.execute(_JOBS_SQL)}
        batches: dict[str, int] = {s: n for s, n in session.execute(_BATCHES_SQL)}
        lines = list(session.execute(_BATCH_LINES_SQL).all())
        queued = list(session.execute(_QUEUED_SQL).all())
        targets = list(session.execute(_TARGETS_SQL).all())
    for status in OPEN_JOB_STATUSES:
        for kind in ("realtime", "batch"):
            m.JOBS_BY_STATUS.labels(status, kind).set(jobs.get((status, kind), 0))
    for status in OPEN_BATCH_STATUSES:
        m.BATCHES.labels(status).set(batches.get(status, 0))
    _set_batch_lines(lines)
    set_queued(queued)
    set_slo_targets(targets)
    _refresh_fairness(dispatcher, force=force)
    _refresh_autoscale(dispatcher, force=force)


def _refresh_autoscale(dispatcher: Any, *, force: bool) -> None:
    global _next_autoscale
    if not force and time.monotonic() < _next_autoscale:
        return
    _next_autoscale = time.monotonic() + AUTOSCALE_REFRESH_S
    with sync_session(dispatcher.settings.database_url) as session:
        decided = autoscale_feed.decide(
            dispatcher.policy, session, _autoscale_reader, now_epoch=time.time(),
            clock=time.monotonic(), models=_autoscale_models,
            config=replace(AUTOSCALE, idle_after_s=dispatcher.settings.dispatcher
                           .autoscale_idle_seconds))
    set_desired(decided)


def set_desired(decided: list[Desired]) -> None:
    """fairway_desired_workers and its inputs; a model keeps one series, its reason's (so
    ``sum by (model_name)`` is its count)."""
    for d in decided:
        _autoscale_models.add(d.model)
        for reason in REASONS:
            if reason != d.reason and (d.model, reason) in _desired_seen:
                m.DESIRED_WORKERS.remove(d.model, reason)
                _desired_seen.discard((d.model, reason))
        m.DESIRED_WORKERS.labels(d.model, d.reason).set(d.workers)
        _desired_seen.add((d.model, d.reason))
        m.AUTOSCALE_REALTIME_WORKERS.labels(d.model).set(d.realtime_workers)
        m.AUTOSCALE_BATCH_WORKERS.labels(d.model).set(d.batch_workers)
        m.AUTOSCALE_BATCH_WORK.labels(d.model).set(d.inputs.get("batch_work_s", 0.0))
        m.AUTOSCALE_REALTIME_BUSY.labels(d.model).set(d.inputs.get("rt_busy_s_per_s", 0.0))


def _refresh_fairness(dispatcher: Any, *, force: bool) -> None:
    """The fairness window is a heavier read than the gauges above: every FAIRNESS_REFRESH_S."""
    global _next_fairness
    if not force and time.monotonic() < _next_fairness:
        return
    _next_fairness = time.monotonic() + FAIRNESS_REFRESH_S
    with sync_session(dispatcher.settings.database_url) as session:
        rows = session.execute(WINDOW_SQL, window_params(FAIRNESS_WINDOW_S)).mappings().all()
    set_fairness(fairness_by_class(tenant_services(rows)))


def set_fairness(report: dict[str, ClassFairness]) -> None:
    """The fairness gauges from one report; tenants and classes gone from the window lose
    their series."""
    for gauge in (m.FAIRNESS_JAIN, m.TENANT_SERVICE, m.TENANT_SHARE_RATIO, m.TENANT_QUEUE_WAIT):
        gauge.clear()
    for job_class, fairness in report.items():
        label = class_label(job_class)
        if fairness.jain is not None:
            m.FAIRNESS_JAIN.labels(label).set(fairness.jain)
        for t in fairness.tenants:
            tenant = tenant_label(t.service.tenant_id)
            m.TENANT_SERVICE.labels(tenant, label).set(t.service.served / FAIRNESS_WINDOW_S)
            if t.share_ratio is not None:
                m.TENANT_SHARE_RATIO.labels(tenant, label).set(t.share_ratio)
            for quantile, wait in (("0.5", t.service.wait_p50_s), ("0.99", t.service.wait_p99_s),
                                   ("1", t.service.oldest_wait_s)):
                if wait is not None:
                    m.TENANT_QUEUE_WAIT.labels(tenant, label, quantile).set(wait)


_queued_seen: dict[tuple[str, str, str], int] = {}  # labels -> the value last exported


def set_queued(rows: list[Any]) -> None:
    """fairway_queued_jobs from (tenant_id, kind, service_tier, n) rows. Tenants past the
    label cap add up under ``other``. A queue that empties reads 0 for one refresh (a graph
    shows it drop), then its series goes, so old tenants' series do not pile up."""
    counts: dict[tuple[str, str, str], int] = {}
    for tenant_id, kind, service_tier, n in rows:
        key = (tenant_label(tenant_id), class_label(kind), tier_label(service_tier, kind))
        counts[key] = counts.get(key, 0) + int(n)
    for key, last in list(_queued_seen.items()):
        if key in counts:
            continue
        if last:
            m.QUEUED_JOBS.labels(*key).set(0)
            _queued_seen[key] = 0
        else:
            m.QUEUED_JOBS.remove(*key)
            del _queued_seen[key]
    for key, n in counts.items():
        m.QUEUED_JOBS.labels(*key).set(n)
        _queued_seen[key] = n


def set_slo_targets(rows: list[Any]) -> None:
    """fairway_slo_target_seconds from (plan, ttft_slo_ms, tpot_slo_ms) rows, for panels and
    alerts to draw and compare against; a deleted plan's series go away (label tenant_tier)."""
    m.SLO_TARGET.clear()
    for plan, ttft_ms, tpot_ms in rows:
        m.SLO_TARGET.labels(str(plan), "ttft").set(ttft_ms / 1000)
        m.SLO_TARGET.labels(str(plan), "tpot").set(tpot_ms / 1000)


def _set_batch_lines(rows: list[Any]) -> None:
    per_tenant: dict[str, dict[str, int]] = {}
    for tenant_id, status, n in rows:
        counts = per_tenant.setdefault(tenant_label(tenant_id), dict.fromkeys(
            ("total", "completed", "failed", "pending"), 0))
        counts["total"] += n
        state = {"succeeded": "completed", "failed": "failed"}.get(status, "pending")
        if status != "cancelled":
            counts[state] += n
    m.BATCH_REQUESTS.clear()
    for tenant, counts in per_tenant.items():
        for state, n in counts.items():
            m.BATCH_REQUESTS.labels(tenant, state).set(n)
