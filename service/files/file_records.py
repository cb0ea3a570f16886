"""File operations for the API (async). Bytes go through `FileStorage`; rows through here."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from service.files.storage import FileStorage
from service.store.models.files import StoredFile


def storage_key(tenant_id: uuid.UUID, file_id: uuid.UUID) -> str:
    return f"{tenant_id.hex}/{file_id.hex}"


async def add_file(session: AsyncSession, *, file_id: uuid.UUID, tenant_id: uuid.UUID,
                   purpose: str, filename: str, size: int, lines: int | None, key: str,
                   expires_at: dt.datetime | None) -> StoredFile:
    row = StoredFile(id=file_id, tenant_id=tenant_id, purpose=purpose, filename=filename,
                     bytes=size, line_count=lines, storage_key=key, expires_at=expires_at)
    session.add(row)
    await session.commit()
    await session.refresh(row)
    return row


def live() -> Any:
    """Not expired: an expired file is gone to clients before the sweep deletes it."""
    return or_(StoredFile.expires_at.is_(None), StoredFile.expires_at > func.now())


async def get_file(session: AsyncSession, *, file_id: uuid.UUID,
                   tenant_id: uuid.UUID) -> StoredFile | None:
    """Another tenant's file, or an expired one, looks exactly like a missing one."""
    return await session.scalar(select(StoredFile).where(
        StoredFile.id == file_id, StoredFile.tenant_id == tenant_id, live()))


async def list_files(session: AsyncSession, *, tenant_id: uuid.UUID, purpose: str | None,
                     after: uuid.UUID | None, limit: int, newest_first: bool
                     ) -> tuple[list[StoredFile], bool]:
    query = select(StoredFile).where(StoredFile.tenant_id == tenant_id, live())
    if purpose:
        query = query.where(StoredFile.purpose == purpose)
    order = (StoredFile.created_at.desc(), StoredFile.id.desc()) if newest_first else (
        StoredFile.created_at.asc(), StoredFile.id.asc())
    if after is not None:
        anchor = await get_file(session, file_id=after, tenant_id=tenant_id)
        if anchor is not None:
            key = (StoredFile.created_at, StoredFile.id)
            cmp = tuple_(*key) < (anchor.created_at, anchor.id) if newest_first else (
                tuple_(*key) > (anchor.created_at, anchor.id))
            query = query.where(cmp)
    rows = list((await session.scalars(query.order_by(*order).limit(limit + 1))).all())
    return rows[:limit], len(rows) > limit


async def delete_file(session: AsyncSession, storage: FileStorage, *, row: StoredFile) -> None:
    # Row first: once it is gone nobody can ask for the bytes, so a crash in between only
    # leaves an orphan object, never a row pointing at nothing.
    await session.delete(row)
    await session.commit()
    storage.delete(row.storage_key)


def file_view(row: StoredFile) -> dict[str, Any]:
    return {
        "id": row.public_id,
        "object": "file",
        "bytes": row.bytes,
        "created_at": int(row.created_at.timestamp()),
        "expires_at": int(row.expires_at.timestamp()) if row.expires_at else None,
        "filename": row.filename,
        "purpose": row.purpose,
        "status": "processed",  # deprecated OpenAI field some clients still read
        "status_details": None,
    }
