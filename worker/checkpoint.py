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
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store import lifecycle, wakeups
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


async def park_job(sessionmaker: async_sessionmaker[AsyncSession], *, job_id: uuid.UUID,
                   attempt: int, worker_id: str, generated_ids: list[int],
                   recomputed: int = 0, events: list[dict[str, Any]] | None = None,
                   first_token_at: dt.datetime | None = None) -> bool:
    """running -> queued with the full list of tokens generated so far, appending ``events``
    to the job's record; False if the job is no longer this attempt's (cancelled meanwhile,
    or its lease was lost)."""
    async with sessionmaker() as session:
        row = (await session.execute(lifecycle.park(
            job_id, attempt=attempt, worker_id=worker_id, generated_ids=generated_ids,
            recomputed=recomputed, events=events or [], now=dt.datetime.now(dt.UTC),
            first_token_at=first_token_at))).first()
        if row is not None:
            # The dispatcher frees the victim's room and re-queues it as a resumable job.
            await session.execute(*wakeups.notify(
                wakeups.JobParked(job_id, worker_id, len(generated_ids))))
        await session.commit()
    return row is not None
