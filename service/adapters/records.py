"""Adapter rows for the API (async): add, list, find, resolve an ``ft:`` name, delete."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.adapter_names import ft_name, parse_ft_name, tenant_slug
from service.store.models.adapters import AdapterStatus, LoraAdapter
from service.store.models.tenants import Tenant


class NameTaken(Exception):
    """The tenant already has a live adapter of that name on that base model."""


def adapter_storage_key(tenant_id: uuid.UUID, adapter_id: uuid.UUID) -> str:
    """The folder's key prefix in file storage; its two files are ``<key>/<file name>``."""
    return f"adapters/{tenant_id.hex}/{adapter_id.hex}"


async def add_adapter(session: AsyncSession, row: LoraAdapter) -> LoraAdapter:
    session.add(row)
    try:
        await session.commit()
    except IntegrityError as exc:
        await session.rollback()
        raise NameTaken from exc
    await session.refresh(row)
    return row


def _live(tenant_id: uuid.UUID) -> Any:
    return (LoraAdapter.tenant_id == tenant_id) & LoraAdapter.deleted_at.is_(None)


async def get_adapter(session: AsyncSession, *, adapter_id: uuid.UUID,
                      tenant_id: uuid.UUID) -> LoraAdapter | None:
    """Another tenant's adapter, or a deleted one, looks exactly like a missing one."""
    return await session.scalar(select(LoraAdapter).where(
        LoraAdapter.id == adapter_id, _live(tenant_id)))


async def list_adapters(session: AsyncSession, *, tenant_id: uuid.UUID) -> list[LoraAdapter]:
    rows = await session.scalars(select(LoraAdapter).where(_live(tenant_id))
                                 .order_by(LoraAdapter.created_at, LoraAdapter.id))
    return list(rows.all())


async def resolve_ft_model(session: AsyncSession, tenant: Tenant,
                           model: str) -> LoraAdapter | None:
    """The tenant's live adapter that ``model`` names, or None (not an ``ft:`` name, another
    tenant's slug, or no such adapter: all look the same to the caller)."""
    parsed = parse_ft_name(model)
    if parsed is None or parsed.tenant_slug != tenant_slug(tenant.name):
        return None
    return await session.scalar(select(LoraAdapter).where(
        _live(tenant.id), LoraAdapter.base_model == parsed.base_model,
        LoraAdapter.name == parsed.adapter))


async def mark_deleted(session: AsyncSession, row: LoraAdapter) -> None:
    """The row stays (jobs that named the adapter keep their history); the files go."""
    row.status = AdapterStatus.DELETED
    row.deleted_at = dt.datetime.now(dt.UTC)
    await session.commit()


def adapter_view(row: LoraAdapter, tenant_name: str) -> dict[str, Any]:
    return {
        "id": row.public_id,
        "object": "lora_adapter",
        "model": ft_name(row.base_model, tenant_name, row.name),
        "name": row.name,
        "base_model": row.base_model,
        "rank": row.rank,
        "target_modules": list(row.target_modules),
        "bytes": row.bytes,
        "status": row.status,
        "created_at": int(row.created_at.timestamp()),
    }


def adapter_model(row: LoraAdapter, tenant_name: str) -> dict[str, Any]:
    """The adapter as an entry of ``GET /v1/models``: OpenAI lists a fine-tune under its
    ``ft:`` name, owned by the organisation that made it."""
    return {"id": ft_name(row.base_model, tenant_name, row.name), "object": "model",
            "created": int(row.created_at.timestamp()), "owned_by": tenant_slug(tenant_name),
            "parent": row.base_model}
