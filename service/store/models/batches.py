"""A batch: one input file turned into many batch jobs, and the OpenAI status machine.

    validating ──▶ failed                (the file is wrong as a whole)
        │
        ▼
    in_progress ──▶ finalizing ──▶ completed
        │  └──────▶ expired              (window over: unfinished lines -> batch_expired)
        └─────────▶ cancelling ──▶ cancelled
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column

BATCH_PREFIX = "batch_"


class BatchStatus(enum.StrEnum):
    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


OPEN_STATUSES = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING,
                 BatchStatus.CANCELLING)


class Batch(Base):
    __tablename__ = "batches"
    __table_args__ = (
        Index("ix_batches_tenant_created", "tenant_id", "created_at"),
        Index("ix_batches_open", "status", postgresql_where=text(
            "status IN ('validating', 'in_progress', 'finalizing', 'cancelling')")),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    endpoint: Mapped[str] = mapped_column(String(64))  # "/v1/chat/completions" | "/v1/completions"
    input_file_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("files.id", ondelete="SET NULL"))
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=BatchStatus.VALIDATING)
    model: Mapped[str | None] = mapped_column(String(256))  # the file's one model
    # "metadata" is reserved on declarative classes, hence the attribute name.
    batch_metadata: Mapped[dict[str, str] | None] = mapped_column("metadata", JSONB)
    # OpenAI's errors.data[]: whole-file failures, plus the first line errors (all of
    # them are in the error file).
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    output_file_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("files.id", ondelete="SET NULL"))
    error_file_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("files.id", ondelete="SET NULL"))
    total: Mapped[int] = mapped_column(Integer, default=0)  # lines, valid or not
    invalid_lines: Mapped[int] = mapped_column(Integer, default=0)
    # Frozen request_counts/usage once the batch is terminal (live ones come from jobs).
    final_counts: Mapped[dict[str, int] | None] = mapped_column(JSONB)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSONB)

    created_at: Mapped[dt.datetime] = utcnow_column()
    in_progress_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    finalizing_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    expired_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    cancelling_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    @property
    def public_id(self) -> str:
        return BATCH_PREFIX + self.id.hex


def parse_batch_id(value: str) -> uuid.UUID | None:
    raw = value[len(BATCH_PREFIX):] if value.startswith(BATCH_PREFIX) else value
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None
