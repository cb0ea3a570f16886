"""Imports every model module so Base.metadata is complete (Alembic and tests use this)."""

from service.admin import models as _audit  # noqa: F401
from service.batches import models as _batches  # noqa: F401
from service.db.base import Base
from service.files import models as _files  # noqa: F401
from service.jobs import models as _jobs  # noqa: F401
from service.quotas import models as _quotas  # noqa: F401
from service.tenants import models as _tenants  # noqa: F401
from service.tiers import models as _tiers  # noqa: F401
from service.usage import models as _usage  # noqa: F401

metadata = Base.metadata
