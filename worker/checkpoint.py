"""Checkpoints of preempted jobs: the generated token ids go to Postgres, the job back to the
queue. A later attempt, on any worker, continues from prompt + those tokens ("swap out" by
recompute: with greedy decoding the continuation is token-identical to an uninterrupted run).

Preemption modes (docs/preemption.md, "Preemption modes"): ``recompute`` drops the victim's KV,
and its resume re-prefills prompt + checkpoint (prefix caching may save part). ``swap`` keeps
the KV in CPU memory for reuse, which needs an engine that can offload it
(`worker.engine.base.supports_kv_offload`); where it cannot, the worker falls back to
recompute and the job's "preempted" event says so.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, cast, func, literal, literal_column, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from service.jobs.events import JOBS_CHANNEL
from service.jobs.models import Job, JobStatus
from worker.engine.base import supports_kv_offload

RECOMPUTE = "recompute"
SWAP = "swap"
MODES = (RECOMPUTE, SWAP)


@dataclass(frozen=True, slots=True)
class PreemptionMode:
    """The mode the settings ask for, the one this engine can honour, and why not if not."""

    requested: str
    used: str
    fallback_reason: str | None = None

    def event_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"mode": self.used}
        if self.fallback_reason is not None:
            fields["requested_mode"] = self.requested
            fields["fallback_reason"] = self.fallback_reason
        return fields


def preemption_mode(requested: str, engine: object) -> PreemptionMode:
    """Decide how a preemption on ``engine`` treats the victim's KV."""
    if requested not in MODES:
        raise ValueError(f"unknown preemption mode {requested!r}; expected one of {MODES}")
    if requested == SWAP and not supports_kv_offload(engine):
        name = type(engine).__name__
        return PreemptionMode(SWAP, RECOMPUTE, (
            f"{name} cannot offload KV to CPU memory (vLLM's KV offloading connector runs "
            f"only on CUDA GPU builds); the KV was dropped and the resume re-prefills"))
    return PreemptionMode(requested, requested)


def job_event(type_: str, **fields: Any) -> dict[str, Any]:
    """One entry of a job's events: {"at": ISO timestamp, "type": ..., ...}."""
    return {"at": dt.datetime.now(dt.UTC).isoformat(), "type": type_, **fields}


def append_events(*events: dict[str, Any]) -> ColumnElement[Any]:
    """``COALESCE(events, '[]'::jsonb) || CAST(:new AS jsonb)``: for an UPDATE's SET, so the
    append happens atomically in the database, whatever else touches the row."""
    new = cast(literal(json.dumps(list(events)), String), JSONB)
    return func.coalesce(Job.events, literal_column("'[]'::jsonb")).op("||")(new)


async def park_job(sessionmaker: async_sessionmaker[AsyncSession], *, job_id: uuid.UUID,
                   attempt: int, worker_id: str, generated_ids: list[int],
                   recomputed: int = 0, events: list[dict[str, Any]] | None = None) -> bool:
    """running -> queued with the full list of tokens generated so far, appending ``events``
    to the job's record; False if the job is no longer this attempt's (cancelled meanwhile,
    or its lease was lost)."""
    now = dt.datetime.now(dt.UTC)
    values: dict[str, Any] = {}
    if events:
        values["events"] = append_events(*events)
    async with sessionmaker() as session:
        row = (await session.execute(
            update(Job)
            .where(Job.id == job_id, Job.attempt == attempt, Job.status == JobStatus.RUNNING,
                   Job.worker_id == worker_id)
            .values(status=JobStatus.QUEUED, worker_id=None, lease_expires_at=None,
                    queued_at=now, updated_at=now, preempted_at=now,
                    preemptions=Job.preemptions + 1, checkpoint_token_ids=generated_ids,
                    recomputed_tokens=Job.recomputed_tokens + recomputed, **values)
            .returning(Job.id)
        )).first()
        if row is not None:
            # The dispatcher frees the victim's room and re-queues it as a resumable job.
            await session.execute(text("SELECT pg_notify(:c, :p)"), {
                "c": JOBS_CHANNEL, "p": f"requeue:{job_id}:{worker_id}:{len(generated_ids)}"})
        await session.commit()
    return row is not None
