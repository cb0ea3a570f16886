"""Ended jobs written straight into Postgres for the spend tests: the tokens, class, key and
end time a worker would have left on the row (no worker needed, and the stack's dispatcher
leaves ended jobs alone)."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import func, select

from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.models.tenants import ApiKey


def ended_job(url: str, tenant_id: uuid.UUID | str, model: str, *, prompt_tokens: int,
              completion_tokens: int, kind: str = "realtime", service_tier: str = "default",
              key_id: uuid.UUID | None = None, finished_at: dt.datetime | None = None
              ) -> uuid.UUID:
    """A succeeded job; ``finished_at`` defaults to Postgres's now() (the prices' clock)."""
    with sync_session(url) as session:
        ended = finished_at or session.scalar(select(func.now()))
        job = Job(tenant_id=uuid.UUID(str(tenant_id)), api_key_id=key_id, kind=kind,
                  service_tier=service_tier, priority=1, endpoint="chat.completions",
                  model=model, request={"messages": []}, max_tokens=16, status="succeeded",
                  attempt=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                  started_at=ended, finished_at=ended)
        session.add(job)
        session.commit()
        return job.id


def first_key(url: str, tenant_id: uuid.UUID | str) -> uuid.UUID:
    with sync_session(url) as session:
        key = session.scalar(select(ApiKey.id).where(ApiKey.tenant_id == uuid.UUID(str(tenant_id)))
                             .order_by(ApiKey.created_at).limit(1))
        assert key is not None
        return key
