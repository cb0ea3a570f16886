"""The dispatcher's translation of heartbeats into WorkerView."""

from __future__ import annotations

import uuid

from scheduler.dispatcher.views import worker_view


def test_heartbeat_job_ids_become_canonical_running_ids() -> None:
    job = uuid.uuid4()
    beat = {
        "worker_id": "w1",
        "models": ["m"],
        "max_slots": 4,
        "running": 2,
        "kv_usage": 0.5,
        "kv_capacity_tokens": 1000,
        "ts": 1.0,
        "job_ids": [job.hex, "not-a-uuid"],
    }
    view = worker_view(beat, {})
    assert view.running_ids == frozenset({str(job)})
    assert (view.running, view.kv_used_tokens) == (2, 500)
    del beat["job_ids"]  # an older worker: nothing reported
    assert worker_view(beat, {}).running_ids == frozenset()
