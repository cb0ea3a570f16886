"""A realtime job is created under its admission ticket's id, so its quota reservation is
already keyed by the job (the worker settles it by job id) and the door makes no re-keying
round trip to Redis (one Redis script fewer per job)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from service.quotas.reservation import Admission


@dataclass
class Created:
    id: uuid.UUID


class RecordingStore:
    def __init__(self) -> None:
        self.bound: list[dict[str, Any]] = []

    async def bind(self, **kwargs: Any) -> bool:
        self.bound.append(kwargs)
        return True


async def _created(job_id: uuid.UUID) -> Created:
    return Created(job_id)


def _guard(ticket: uuid.UUID, job_id: uuid.UUID) -> tuple[Admission, RecordingStore]:
    store = RecordingStore()
    holder = Admission(store, uuid.uuid4(), ticket, 10, "default", 1.0)  # type: ignore[arg-type]
    asyncio.run(holder.guard(_created(job_id)))
    return holder, store


def test_a_job_created_under_its_ticket_needs_no_rebinding() -> None:
    ticket = uuid.uuid4()
    holder, store = _guard(ticket, ticket)
    assert holder.job_id == ticket and store.bound == []

