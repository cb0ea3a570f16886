"""A stored file: an uploaded batch input or a generated batch output/error file."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import BigInteger, DateTime, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

FILE_PREFIX = "file-"


class StoredFile(Base):
    __tablename__ = "files"
    __table_args__ = (Index("ix_files_tenant_created", "tenant_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    purpose: Mapped[str] = mapped_column(String(32))  # batch | batch_output
    filename: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    line_count: Mapped[int | None] = mapped_column(Integer)
    # Where the bytes live in the storage backend; never shown to clients.
    storage_key: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[dt.datetime] = utcnow_column()
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    @property
    def public_id(self) -> str:
        return FILE_PREFIX + self.id.hex


def parse_file_id(value: str) -> uuid.UUID | None:
    raw = value[len(FILE_PREFIX):] if value.startswith(FILE_PREFIX) else value
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None
