"""What a worker observes about a batch-file line: its labels and its SLO verdict."""

from __future__ import annotations

import datetime as dt
import time
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


def test_an_output_sent_before_the_observer_counts_from_when_it_left():
    # An express job's first token leaves before its claim, which makes the observer.
    obs = JobObserver(_line(str(uuid.uuid4()), 3600), attempt=1, now=dt.datetime.now(dt.UTC))
    left = time.perf_counter() - 0.25
    obs.output(at=left)
    assert obs.last_output == left
    assert obs.first_token_at is not None
    ago = (dt.datetime.now(dt.UTC) - obs.first_token_at).total_seconds()
    assert 0.25 <= ago < 0.5  # when it left, not when it was observed
    labels = {"model_name": "m-batch", "class": "batch"}
    before = _count("vllm:inter_token_latency_seconds_sum", **labels)
    obs.output()
    assert _count("vllm:inter_token_latency_seconds_sum", **labels) - before >= 0.25
