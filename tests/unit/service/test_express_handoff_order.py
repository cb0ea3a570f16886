"""The express hand-off's entry leaves before the insert sends its statement
(service.jobs.express.insert_and_hand_off): the worker starts the engine while the row
commits, so nothing the insert does first delays the first token."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from service.jobs.express import Express, insert_and_hand_off
from service.store import lifecycle


class RecordingRedis:
    """As redis-py's: the command is written before the call's first wait (the reply)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def xadd(self, stream: str, fields: dict[str, Any], **_: Any) -> bytes:
        self.events.append(f"xadd {stream}")
        await asyncio.sleep(0.001)  # the round trip
        return b"1-0"


def placed() -> Any:
    return lifecycle.placed_job(
        worker_id="w1", id=uuid.uuid4(), tenant_id=uuid.uuid4(), kind="realtime",
        service_tier="default", priority=0, endpoint="chat.completions", model="m",
        request={"messages": [{"role": "user", "content": "hi"}]}, stream=True,
        max_tokens=4, deadline_at=None)


def test_the_entry_is_sent_before_the_insert_starts() -> None:
    events: list[str] = []

    async def insert() -> str:
        events.append("insert")
        await asyncio.sleep(0.001)
        return "row"

    async def run() -> str:
        express = Express(RecordingRedis(events), lease_s=30.0)  # type: ignore[arg-type]
        return await insert_and_hand_off(express, None, placed(), insert)  # type: ignore[arg-type]

    assert asyncio.run(run()) == "row"
    assert [e.split()[0] for e in events] == ["xadd", "insert"]
    assert events[0].endswith("w1")  # the ticket's worker's stream
