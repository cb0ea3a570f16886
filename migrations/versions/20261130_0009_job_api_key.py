"""Jobs remember the API key that sent them (per-key usage in the admin dashboard).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: jobs from before, and batch lines (a batch's jobs are not sent by a key of
    # their own), have none. SET NULL: a key's row going away keeps its jobs.
    op.add_column("jobs", sa.Column("api_key_id", sa.Uuid(), nullable=True))
    op.create_foreign_key("fk_jobs_api_key_id_api_keys", "jobs", "api_keys", ["api_key_id"],
                          ["id"], ondelete="SET NULL")


def downgrade() -> None:
    op.drop_constraint("fk_jobs_api_key_id_api_keys", "jobs", type_="foreignkey")
    op.drop_column("jobs", "api_key_id")
