"""Audit log writes and reads. Every admin change calls `record` before its commit (the admin
API in its async session, `fairway up` and the CLI's bootstrap in a sync one)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.models.audit import AuditEntry
from service.store.models.tenants import ApiKey, Tenant


def record(session: AsyncSession | Session, *, actor: str, action: str, target_type: str,
           target_id: str, details: dict[str, Any] | None = None) -> None:
    session.add(AuditEntry(actor=actor, action=action, target_type=target_type,
                           target_id=target_id, details=details or {}))


def _filtered(query: Select[Any], *, target_id: str | None, action: str | None,
              actor: str | None) -> Select[Any]:
    if target_id is not None:
        query = query.where(AuditEntry.target_id == target_id)
    if action:  # "tenant." matches every tenant action; "tenant.suspend" only that one
        query = query.where(AuditEntry.action.startswith(action, autoescape=True))
    if actor:
        query = query.where(AuditEntry.actor.startswith(actor, autoescape=True))
    return query


async def recent(session: AsyncSession, *, limit: int = 100, offset: int = 0,
                 target_id: str | None = None, action: str | None = None,
                 actor: str | None = None) -> list[dict[str, Any]]:
    """Newest first, each entry with `target_name` (and `key_name` for key actions)."""
    query = _filtered(select(AuditEntry), target_id=target_id, action=action, actor=actor)
    entries = (await session.scalars(
        query.order_by(AuditEntry.id.desc()).limit(limit).offset(offset))).all()
    tenant_names = await _tenant_names(session, {e.target_id for e in entries
                                                 if e.target_type == "tenant"})
    key_names = await _key_names(session, {str(e.details.get("key_id")) for e in entries
                                           if e.details.get("key_id")})
    out = []
    for e in entries:
        name = (tenant_names.get(e.target_id) if e.target_type == "tenant" else e.target_id)
        key_id = e.details.get("key_id")
        out.append({"id": e.id, "at": e.at.isoformat(), "actor": e.actor, "action": e.action,
                    "target_type": e.target_type, "target_id": e.target_id,
                    "target_name": name,
                    "key_name": (key_names.get(str(key_id)) or e.details.get("name"))
                    if key_id else None,
                    "details": e.details})
    return out


async def count(session: AsyncSession, *, target_id: str | None = None,
                action: str | None = None, actor: str | None = None) -> int:
    query = _filtered(select(func.count()).select_from(AuditEntry), target_id=target_id,
                      action=action, actor=actor)
    return int(await session.scalar(query) or 0)


def _uuids(ids: set[str]) -> list[uuid.UUID]:
    """The ids that are UUIDs (audit targets also name plans, which are not)."""
    out = []
    for raw in ids:
        try:
            out.append(uuid.UUID(raw))
        except ValueError:
            continue
    return out


async def _tenant_names(session: AsyncSession, ids: set[str]) -> dict[str, str]:
    """Live tenants from their row; a deleted one by the name its create/delete entry kept."""
    uuids = _uuids(ids)
    names = {str(i): n for i, n in (await session.execute(
        select(Tenant.id, Tenant.name).where(Tenant.id.in_(uuids)))).all()} if uuids else {}
    gone = ids - names.keys()
    if gone:
        rows = await session.execute(
            select(AuditEntry.target_id, AuditEntry.details["name"].astext)
            .where(AuditEntry.target_type == "tenant", AuditEntry.target_id.in_(gone),
                   AuditEntry.action.in_(("tenant.create", "tenant.delete"))))
        names.update({tid: name for tid, name in rows.all() if name})
    return names


async def _key_names(session: AsyncSession, ids: set[str]) -> dict[str, str]:
    uuids = _uuids(ids)
    if not uuids:
        return {}
    rows = await session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(uuids)))
    return {str(i): n for i, n in rows.all()}
