"""Whether this process records metrics (FAIRWAY_METRICS_ENABLED). Off, every observer is a
no-op and /metrics is not served: bench/metrics_overhead.py compares the two."""

from __future__ import annotations

from service.observability.metrics import REGISTRY
from service.observability.slo import SloWindows

_enabled = True
SLO_WINDOWS = SloWindows()
REGISTRY.register(SLO_WINDOWS)


def set_enabled(flag: bool) -> None:
    global _enabled
    _enabled = bool(flag)


def enabled() -> bool:
    return _enabled


def configure(settings: object) -> None:
    """Apply FAIRWAY_METRICS_ENABLED and FAIRWAY_METRICS_MAX_TENANTS to this process."""
    from service.observability.labels import tenant_label

    set_enabled(getattr(settings, "metrics_enabled", True))
    tenant_label.max_tenants = int(getattr(settings, "metrics_max_tenants", 100))
