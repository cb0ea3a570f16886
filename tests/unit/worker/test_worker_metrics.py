"""What a worker observes about a batch-file line: its labels and its SLO verdict."""

from __future__ import annotations

import datetime as dt
import uuid
from types import SimpleNamespace

from service.store.telemetry import metrics as m
from worker.metrics import JobObserver


def _line(tenant: str, deadline_in_s: float) -> SimpleNamespace:
    now = dt.datetime.now(dt.UTC)
    return SimpleNamespace(model="m-batch", kind="batch", tenant_id=tenant,
                           service_tier="default",  # what a batch line's output echoes
                           created_at=now - dt.timedelta(seconds=1), assigned_at=now,
                           deadline_at=now + dt.timedelta(seconds=deadline_in_s),
                           first_token_at=None, batch_id=uuid.uuid4())


def _count(name: str, **labels: str) -> float:
    return m.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_batch_line_is_labelled_tier_batch_and_judged_by_its_deadline():
    tenant = str(uuid.uuid4())  # its label: a name, or the id (no database), or "other"
    for deadline_in_s in (3600, -0.5):  # one in time, one after its deadline
        obs = JobObserver(_line(tenant, deadline_in_s), attempt=1,
                          now=dt.datetime.now(dt.UTC))
        assert obs.labels[2:] == ("batch", "batch")
        obs.output()
        obs.finished("succeeded")
    base = {"tenant": obs.labels[1], "class": "batch", "tier": "batch"}
    assert _count("fairway_jobs_finished_total", model_name="m-batch", status="succeeded",
                  **base) == 2
    assert _count("vllm:e2e_request_latency_seconds_count", model_name="m-batch", **base) == 2
    assert _count("fairway_slo_requests_total", kind="deadline", outcome="met", **base) == 1
    assert _count("fairway_slo_requests_total", kind="deadline", outcome="missed", **base) == 1
