"""Webhook events for background responses, written in the transaction that ends them.

Every status write that can end a job (service.store.lifecycle: end, reject, cancel) RETURNs
the columns this needs (``lifecycle.ENDED``), and its caller hands each returned row here: a
background response that reached a terminal status gets ``response.completed | incomplete |
failed | cancelled`` in the outbox (service.store.webhook_events), committed with the status
or not at all.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.response_status import (
    RESPONSE_PREFIX,
    RESPONSE_TERMINAL_STATUSES,
    RESPONSES_ENDPOINT,
    response_status,
)
from service.store.webhook_events import record_event, record_event_async


def response_event(row: Any) -> tuple[str, dict[str, Any]] | None:
    """(event type, data) for a row that ended a background response, else None. Only
    background responses: a waited one's client has its answer in hand (as OpenAI does)."""
    if row.endpoint != RESPONSES_ENDPOINT or not row.background:
        return None
    status = response_status(str(row.status), row.finish_reason, row.started_at)
    if status not in RESPONSE_TERMINAL_STATUSES:
        return None
    return f"response.{status}", {"id": RESPONSE_PREFIX + row.id.hex}


def record_response_end(session: Session, row: Any) -> None:
    event = response_event(row)
    if event is not None:
        record_event(session, row.tenant_id, *event)


async def record_response_end_async(session: AsyncSession, row: Any) -> None:
    event = response_event(row)
    if event is not None:
        await record_event_async(session, row.tenant_id, *event)
