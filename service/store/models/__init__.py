"""Every ORM model of Fairway's system of record. Importing this package loads them all, so
``Base.metadata`` is complete (foreign keys across tables resolve; Alembic and tests use it)."""

from service.store.db import Base
from service.store.models import (  # noqa: F401
    adapters,
    audit,
    batches,
    files,
    jobs,
    plans,
    quotas,
    served_models,
    spend,
    tenants,
    usage,
    webhooks,
)

metadata = Base.metadata
