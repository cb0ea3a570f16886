"""The dispatcher's queue-depth and SLO-target gauges, from the rows its refresh reads."""

from __future__ import annotations

import uuid

from scheduler.dispatcher import metrics as dm
from service.store.telemetry import metrics as m
from service.store.telemetry.labels import TenantLabels


def _queued(tenant: str, job_class: str, tier: str) -> float | None:
    return m.REGISTRY.get_sample_value("fairway_queued_jobs",
                                       {"tenant": tenant, "class": job_class, "tier": tier})


def test_queued_jobs_by_tenant_class_and_tier(monkeypatch):
    names = {"id-a": f"qa-{uuid.uuid4().hex[:6]}", "id-b": f"qb-{uuid.uuid4().hex[:6]}"}
    monkeypatch.setattr(dm, "tenant_label", TenantLabels(lookup=names.get))
    a, b = "id-a", "id-b"
    la, lb = names[a], names[b]  # labelled by name
    dm.set_queued([(a, "realtime", "priority", 2), (a, "realtime", "default", 3),
                   (a, "batch", "default", 40),  # batch-file lines: labelled tier "batch"
                   (a, "batch", "flex", 5), (b, "realtime", "default", 1)])
    assert _queued(la, "realtime", "priority") == 2
    assert _queued(la, "realtime", "default") == 3
    assert _queued(la, "batch", "batch") == 40
    assert _queued(la, "batch", "flex") == 5
    assert _queued(lb, "realtime", "default") == 1
    dm.set_queued([(a, "batch", "default", 7)])
    assert _queued(lb, "realtime", "default") == 0  # emptied: reads 0 once ...
    assert _queued(la, "batch", "batch") == 7
    dm.set_queued([(a, "batch", "default", 7)])
    assert _queued(lb, "realtime", "default") is None  # ... then the series goes


def test_slo_targets_per_tenant_tier():
    dm.set_slo_targets([("free", 3000, 200), ("premium", 500, 50)])
    value = m.REGISTRY.get_sample_value
    assert value("fairway_slo_target_seconds", {"tenant_tier": "free", "kind": "ttft"}) == 3.0
    assert value("fairway_slo_target_seconds", {"tenant_tier": "premium", "kind": "tpot"}) \
        == 0.05
    dm.set_slo_targets([("premium", 400, 50)])  # free deleted, premium edited
    assert value("fairway_slo_target_seconds", {"tenant_tier": "free", "kind": "ttft"}) is None
    assert value("fairway_slo_target_seconds", {"tenant_tier": "premium", "kind": "ttft"}) \
        == 0.4
