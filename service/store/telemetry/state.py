"""Whether this process records metrics (FAIRWAY_METRICS_ENABLED). Off, every observer is a
no-op and /metrics is not served: bench/metrics_overhead.py compares the two."""

from __future__ import annotations

from service.store.settings import MetricsSettings
from service.store.telemetry import metrics as m
from service.store.telemetry import refusals, tenant_directory
from service.store.telemetry.labels import tenant_label
from service.store.telemetry.slo import SloWindows

_enabled = True
SLO_WINDOWS = SloWindows()
m.REGISTRY.register(SLO_WINDOWS)


def set_enabled(flag: bool) -> None:
    global _enabled
    _enabled = bool(flag)


def enabled() -> bool:
    return _enabled


def configure(metrics: MetricsSettings, database_url: str | None = None) -> None:
    """Apply FAIRWAY_METRICS_ENABLED and FAIRWAY_METRICS_MAX_TENANTS to this process; with a
    database, tenant labels carry the tenants' names (labels.py)."""
    set_enabled(metrics.enabled)
    tenant_label.max_tenants = metrics.max_tenants
    if metrics.enabled:
        tenant_directory.attach(tenant_label, database_url)


def record_rejection(tenant: object, reason: str) -> None:
    """Count a refused job or batch by the machine-readable reason (the limit that refused)."""
    refusals.note(tenant, reason)  # the admin dashboard's recent list, metrics on or off
    if enabled():
        m.REJECTIONS.labels(tenant_label(tenant), reason).inc()


def record_slo(tenant: str, job_class: str, tier: str, verdict: dict[str, bool]) -> None:
    """Count one judged request (``verdict``: slo_rules.judge's {kind: met}), already-made
    labels in: the counters that add up across the fleet, and this process's windows."""
    for kind, met in verdict.items():
        m.SLO_REQUESTS.labels(tenant, job_class, tier, kind, "met" if met else "missed").inc()
    SLO_WINDOWS.record(job_class, verdict)
