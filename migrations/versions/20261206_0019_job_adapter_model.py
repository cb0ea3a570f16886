"""The adapter a job ran with (its ``ft:`` name; null for a base-model job), so usage and
spend grouped by model show an adapter's requests under the adapter's name while ``model``
keeps the base model that places the job. A column rather than the request's own ``model``:
the usage query reads every job row of its range, and reading the name out of the request
JSON would detoast each request. No index: every read of it is a range already narrowed by
tenant and time.

Jobs made before it that named an adapter are filled in: only a tenant with adapters can
have such jobs, and none from before its first adapter (the tenant-and-created index).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_BACKFILL = """
UPDATE jobs AS j SET adapter_model = j.request->>'model'
FROM (SELECT tenant_id, min(created_at) AS since FROM lora_adapters GROUP BY tenant_id) AS a
WHERE j.tenant_id = a.tenant_id AND j.created_at >= a.since
  AND j.request->>'model' LIKE 'ft:%'
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("adapter_model", sa.String(256), nullable=True))
    op.execute(_BACKFILL)


def downgrade() -> None:
    op.drop_column("jobs", "adapter_model")
