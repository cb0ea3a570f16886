"""Whether this process records metrics (FAIRWAY_METRICS_ENABLED). Off, every observer is a
no-op and /metrics is not served: bench/metrics_overhead.py compares the two."""

from __future__ import annotations

from service.store.settings import MetricsSettings
from service.store.telemetry import metrics as m
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


def configure(metrics: MetricsSettings) -> None:
    """Apply FAIRWAY_METRICS_ENABLED and FAIRWAY_METRICS_MAX_TENANTS to this process."""
    set_enabled(metrics.enabled)
    tenant_label.max_tenants = metrics.max_tenants


def record_rejection(tenant: object, reason: str) -> None:
    """Count a refused job or batch by the machine-readable reason (the limit that refused)."""
    if enabled():
        m.REJECTIONS.labels(tenant_label(tenant), reason).inc()
