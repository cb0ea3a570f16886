"""The batch lifecycle: OpenAI's batch statuses as one table, and the one place that writes them.

    event          from                      to           stamped
    create         -                         validating   created_at
    validated      validating                in_progress  in_progress_at
    refused        validating                failed       failed_at
    cancel         validating | in_progress  cancelling   cancelling_at
    finalize       in_progress               finalizing   finalizing_at
    complete       finalizing                completed    completed_at
    expire         in_progress               expired      expired_at
    cancelled      cancelling                cancelled    cancelled_at

Two ways to apply an event, both checked against the table: ``guarded`` builds
``UPDATE batches ... WHERE status IN (<from>)`` for a row nobody holds (a stale writer matches
nothing), and ``advance`` moves a row its caller has locked ``FOR UPDATE`` (validation,
finalizing, expiry, which write files while they hold the lock). docs/batches.md draws the
same table.

The four final moves emit a webhook event (``WEBHOOK_EVENTS``) in the same transaction, so a
batch is final exactly when its event is recorded. Only ``advance`` makes them: ``guarded``
refuses them, as it has no row to write the event for.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Update, select, update
from sqlalchemy.orm import Session, object_session

from service.store.models.batches import Batch, BatchStatus
from service.store.webhook_events import record_event

S = BatchStatus


class BatchEvent(enum.StrEnum):
    CREATE = "create"
    VALIDATED = "validated"
    REFUSED = "refused"
    CANCEL = "cancel"
    FINALIZE = "finalize"
    COMPLETE = "complete"
    EXPIRE = "expire"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class BatchTransition:
    sources: frozenset[BatchStatus]
    target: BatchStatus
    stamp: str  # the timestamp column the move sets


BATCH_TRANSITIONS: Mapping[BatchEvent, BatchTransition] = {
    BatchEvent.CREATE: BatchTransition(frozenset(), S.VALIDATING, "created_at"),
    BatchEvent.VALIDATED: BatchTransition(frozenset({S.VALIDATING}), S.IN_PROGRESS,
                                          "in_progress_at"),
    BatchEvent.REFUSED: BatchTransition(frozenset({S.VALIDATING}), S.FAILED, "failed_at"),
    BatchEvent.CANCEL: BatchTransition(frozenset({S.VALIDATING, S.IN_PROGRESS}), S.CANCELLING,
                                       "cancelling_at"),
    BatchEvent.FINALIZE: BatchTransition(frozenset({S.IN_PROGRESS}), S.FINALIZING,
                                         "finalizing_at"),
    BatchEvent.COMPLETE: BatchTransition(frozenset({S.FINALIZING}), S.COMPLETED, "completed_at"),
    BatchEvent.EXPIRE: BatchTransition(frozenset({S.IN_PROGRESS}), S.EXPIRED, "expired_at"),
    BatchEvent.CANCELLED: BatchTransition(frozenset({S.CANCELLING}), S.CANCELLED,
                                          "cancelled_at"),
}

# The moves that end a batch, and the webhook event each records (OpenAI's batch events).
WEBHOOK_EVENTS: Mapping[BatchEvent, str] = {
    BatchEvent.COMPLETE: "batch.completed",
    BatchEvent.REFUSED: "batch.failed",
    BatchEvent.EXPIRE: "batch.expired",
    BatchEvent.CANCELLED: "batch.cancelled",
}

ALLOWED_BATCH_MOVES: frozenset[tuple[BatchStatus, BatchStatus]] = frozenset(
    (source, t.target) for t in BATCH_TRANSITIONS.values() for source in t.sources)


class IllegalBatchMove(RuntimeError):
    """A caller tried a move the table does not allow (a bug, not bad input)."""


def new_batch(*, now: dt.datetime, **fields: Any) -> Batch:
    """A batch as ``POST /v1/batches`` creates it: validating, its file not yet read."""
    rule = BATCH_TRANSITIONS[BatchEvent.CREATE]
    return Batch(**fields, status=rule.target, **{rule.stamp: now})


def sources(event: BatchEvent) -> list[str]:
    """The statuses ``event`` may leave, for a caller's ``SELECT ... FOR UPDATE``."""
    return sorted(BATCH_TRANSITIONS[event].sources)


def guarded(event: BatchEvent, *where: ColumnElement[bool], now: dt.datetime,
            values: Mapping[str, Any] | None = None) -> Update:
    """``UPDATE batches SET status, <stamp> WHERE status IN <from> AND <where>``."""
    if event in WEBHOOK_EVENTS:
        raise IllegalBatchMove(f"{event} ends a batch: lock it and `advance` (its webhook)")
    rule = BATCH_TRANSITIONS[event]
    return (update(Batch).where(Batch.status.in_(sources(event)), *where)
            .values(status=rule.target, **{rule.stamp: now}, **(values or {})))


def lock(session: Session, batch_id: uuid.UUID, event: BatchEvent) -> Batch | None:
    """The batch row, locked ``FOR UPDATE`` for the caller's transaction, if it is in a status
    ``event`` may leave and no one else holds it; else None (and the transaction ends)."""
    batch = session.scalar(select(Batch).where(Batch.id == batch_id,
                                               Batch.status.in_(sources(event)))
                           .with_for_update(skip_locked=True))
    if batch is None:
        session.rollback()
    return batch


def advance(batch: Batch, event: BatchEvent, now: dt.datetime) -> None:
    """Move a batch row the caller holds locked; the session's flush writes it. A final move
    also records its webhook event in the row's session (committed with the move)."""
    rule = BATCH_TRANSITIONS[event]
    if batch.status not in rule.sources:
        raise IllegalBatchMove(f"{event}: batch is {batch.status}, not one of "
                               f"{sorted(rule.sources)}")
    batch.status = rule.target
    setattr(batch, rule.stamp, now)
    webhook = WEBHOOK_EVENTS.get(event)
    if webhook is not None:
        session = object_session(batch)
        if session is None:
            raise IllegalBatchMove(f"{event}: the batch row is not in a session")
        record_event(session, batch.tenant_id, webhook, {"id": batch.public_id}, now=now)
