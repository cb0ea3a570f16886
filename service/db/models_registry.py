"""Imports every model module so Base.metadata is complete (Alembic and tests use this)."""

from service.db.base import Base
from service.jobs import models as _jobs  # noqa: F401
from service.tenants import models as _tenants  # noqa: F401

metadata = Base.metadata
