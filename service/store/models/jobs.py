"""The job: one inference request, realtime or batch, and everything that happened to it.

Status machine (docs/jobs.md has the diagram):

    queued ──claim──▶ assigned ──worker starts──▶ running ──▶ succeeded | failed
      ▲                  │                          │
      └── lease expired / preempted (attempt kept; the next claim adds 1) ─┘
    queued | assigned | running ──client gone / cancel──▶ cancelled
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Identity, Index, Integer, String, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobKind(enum.StrEnum):
    REALTIME = "realtime"
    BATCH = "batch"


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_status_seq", "status", "seq"),
        Index("ix_jobs_tenant_created_id", "tenant_id", "created_at", "id"),  # GET /v1/jobs
        Index("ix_jobs_batch_status", "batch_id", "status"),
        # The usage roll-up's range scan (service.store.usage): only ended jobs have one.
        Index("ix_jobs_usage_xid", "usage_xid", postgresql_where=text("usage_xid IS NOT NULL")),
        # The windows over recently ended jobs (SLO attainment, fairness): ended jobs only.
        Index("ix_jobs_finished_at", "finished_at",
              postgresql_where=text("finished_at IS NOT NULL")),
        # The explorer's lookup by the x-request-id a client quotes: API-made jobs only.
        Index("ix_jobs_request_id", "request_id",
              postgresql_where=text("request_id IS NOT NULL")),
        Index(
            "ix_jobs_lease_active",
            "lease_expires_at",
            postgresql_where=text("status IN ('assigned', 'running')"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    # Monotonic arrival order for the dispatcher's scans (uuid4 has none).
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # The key that sent it (per-key usage); None for batch lines and jobs from before.
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(16))  # JobKind
    service_tier: Mapped[str] = mapped_column(String(16))  # what the response echoes
    priority: Mapped[int] = mapped_column(Integer)  # lower runs first
    endpoint: Mapped[str] = mapped_column(String(32))  # "chat.completions" | "completions"
    model: Mapped[str] = mapped_column(String(256))  # the base model: what places it
    # The tenant's adapter it ran with (its ft: name, as the request named it; None: the base
    # model): usage and spend show it under this name (service.usage.completions).
    adapter_model: Mapped[str | None] = mapped_column(String(256))
    request: Mapped[dict[str, Any]] = mapped_column(JSONB)
    stream: Mapped[bool] = mapped_column(default=False)
    max_tokens: Mapped[int] = mapped_column(Integer)
    deadline_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    # Generated token ids so far; a resumed attempt continues from prompt + these.
    # None is SQL NULL, not JSON null: the dispatcher's read takes its array length.
    checkpoint_token_ids: Mapped[list[int] | None] = mapped_column(JSONB(none_as_null=True))
    # Preemption record: how often, prefill paid again on resume, and time spent parked.
    preemptions: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    recomputed_tokens: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    parked_seconds: Mapped[float] = mapped_column(server_default="0", default=0.0)
    preempted_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # What happened to the job beyond its status, oldest first: [{"at": iso ts, "type":
    # "preempted" | "resumed", ...}]. Appended in SQL (worker.checkpoint.append_event), never
    # rewritten from Python, so concurrent writers cannot lose each other's entries.
    events: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    # Batch lines only: the batch, the line's custom_id and its 1-based line in the input file.
    batch_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("batches.id", ondelete="CASCADE"))
    custom_id: Mapped[str | None] = mapped_column(String(512))
    line_no: Mapped[int | None] = mapped_column(Integer)

    # A realtime job's SLO as admitted: its plan and that plan's targets then, so a later
    # plan change does not re-judge it (service.admin.live). Null for batch-class jobs.
    slo_plan: Mapped[str | None] = mapped_column(String(32))
    ttft_slo_ms: Mapped[int | None] = mapped_column(Integer)
    tpot_slo_ms: Mapped[int | None] = mapped_column(Integer)
    # The door's predicted time to first token when it admitted the job (None: not judged),
    # to check the prediction against what came (bench/overload.py).
    predicted_ttft_ms: Mapped[int | None] = mapped_column(Integer)
    # The x-request-id of the API request that created it (service.web.request_id).
    request_id: Mapped[str | None] = mapped_column(String(128))

    created_at: Mapped[dt.datetime] = utcnow_column()
    queued_at: Mapped[dt.datetime] = utcnow_column()
    assigned_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    first_token_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = utcnow_column()
    # The transaction of the worker's final write, which the usage roll-up counts once
    # (service.store.usage); null until then, and for jobs no worker ended.
    usage_xid: Mapped[int | None] = mapped_column(BigInteger)

    @property
    def public_id(self) -> str:
        return f"job_{self.id.hex}"
