"""Jobs and batches with known timelines, written straight into Postgres for the explorer's
tests: every stamp a dispatcher and worker would have left, at chosen offsets, so the
timeline, durations and verdict can be asserted exactly (the stack's dispatcher leaves ended
jobs alone)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select

from service.store.db import sync_session
from service.store.models.batches import Batch
from service.store.models.files import StoredFile
from service.store.models.jobs import Job

WORKER = "explorer-w1"


def _at(base: dt.datetime, ms: int) -> dt.datetime:
    return base + dt.timedelta(milliseconds=ms)


def slow_job(url: str, tenant_id: str, *, queue_ms: int = 1800, preempted: bool = False,
             batch_id: uuid.UUID | None = None, custom_id: str | None = None,
             line_no: int | None = None, status: str = "succeeded", decode_ms: int = 200,
             error: dict[str, Any] | None = None) -> uuid.UUID:
    """A realtime job (a batch line with ``batch_id``) that waited ``queue_ms`` in the queue,
    then: placed, started 20 ms later, first token 60 ms after that, 20 more tokens over
    ``decode_ms``.
    ``preempted``: parked 50 ms after its first token for 500 ms, placed again, resumed
    60 ms after (its prefill again), then ``decode_ms`` to the end."""
    with sync_session(url) as session:
        base = session.scalar(select(func.now())) - dt.timedelta(minutes=5)
        assigned = queue_ms
        events: list[dict[str, Any]] = []
        first = assigned + 80
        parked = 0
        if preempted:
            events.append({"at": _at(base, first + 50).isoformat(), "type": "preempted",
                           "worker": WORKER, "mode": "recompute", "checkpoint_tokens": 5})
            assigned = first + 550
            events.append({"at": _at(base, assigned + 60).isoformat(), "type": "resumed",
                           "worker": WORKER, "after": "preemption", "checkpoint_tokens": 5})
            parked = 500
        finished = (assigned + 60 if preempted else first) + decode_ms
        realtime = batch_id is None
        job = Job(tenant_id=uuid.UUID(tenant_id), kind="realtime" if realtime else "batch",
                  service_tier="default" if realtime else "batch", priority=1,
                  endpoint="chat.completions", model="sim-model", request={"messages": []},
                  max_tokens=32, status=status, attempt=2 if preempted else 1,
                  worker_id=WORKER, finish_reason="length" if status == "succeeded" else None,
                  prompt_tokens=12, completion_tokens=21, cached_tokens=4, error=error,
                  slo_plan="standard" if realtime else None,
                  ttft_slo_ms=1000 if realtime else None, tpot_slo_ms=100 if realtime else None,
                  predicted_ttft_ms=400 if realtime else None,
                  preemptions=1 if preempted else 0, parked_seconds=parked / 1000,
                  preempted_at=None, events=events or None, batch_id=batch_id,
                  custom_id=custom_id, line_no=line_no,
                  created_at=base, queued_at=_at(base, first + 50) if preempted else base,
                  assigned_at=_at(base, assigned), started_at=_at(base, assigned + 20),
                  first_token_at=_at(base, first), finished_at=_at(base, finished))
        session.add(job)
        session.commit()
        return job.id


def finished_batch(url: str, tenant_id: str) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """A completed batch of three lines (a, b, c: b the slowest, c failed) with an input file.
    Returns the batch id and its lines' job ids in line order."""
    with sync_session(url) as session:
        now = session.scalar(select(func.now()))
        tid = uuid.UUID(tenant_id)
        infile = StoredFile(tenant_id=tid, purpose="batch", filename="explore.jsonl",
                            bytes=1234, line_count=3, storage_key=f"test/{uuid.uuid4().hex}")
        session.add(infile)
        session.flush()
        batch = Batch(tenant_id=tid, endpoint="/v1/chat/completions", completion_window="24h",
                      status="completed", model="sim-model", input_file_id=infile.id, total=3,
                      final_counts={"total": 3, "completed": 2, "failed": 1, "cancelled": 0},
                      created_at=now, in_progress_at=now, completed_at=now,
                      expires_at=now + dt.timedelta(hours=24))
        session.add(batch)
        session.commit()
        batch_id = batch.id
    jobs = [slow_job(url, tenant_id, queue_ms=100, batch_id=batch_id, custom_id="a", line_no=1),
            slow_job(url, tenant_id, queue_ms=100, preempted=True, batch_id=batch_id,
                     custom_id="b", line_no=2, decode_ms=600),
            slow_job(url, tenant_id, queue_ms=100, batch_id=batch_id, custom_id="c", line_no=3,
                     status="failed", error={"code": "engine_error", "message": "it broke",
                                             "status": 500})]
    return batch_id, jobs
