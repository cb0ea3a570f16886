"""Audit log writes and reads. Every admin change calls `record` before its commit (the admin
API in its async session, `fairway up` and the CLI's bootstrap in a sync one)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.models.audit import AuditEntry


def record(session: AsyncSession | Session, *, actor: str, action: str, target_type: str,
           target_id: str, details: dict[str, Any] | None = None) -> None:
    session.add(AuditEntry(actor=actor, action=action, target_type=target_type,
                           target_id=target_id, details=details or {}))


async def recent(session: AsyncSession, *, limit: int = 100, target_id: str | None = None
                 ) -> list[dict[str, Any]]:
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if target_id is not None:
        query = query.where(AuditEntry.target_id == target_id)
    return [{"id": e.id, "at": e.at.isoformat(), "actor": e.actor, "action": e.action,
             "target_type": e.target_type, "target_id": e.target_id, "details": e.details}
            for e in (await session.scalars(query)).all()]
