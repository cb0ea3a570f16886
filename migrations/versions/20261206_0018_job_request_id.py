"""The request id (``x-request-id``) a realtime job was created under, so an operator finds
the job from the id a client quotes (the explorer, ``fairway job show``); indexed where set.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("request_id", sa.String(128), nullable=True))
    op.create_index("ix_jobs_request_id", "jobs", ["request_id"],
                    postgresql_where=sa.text("request_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_jobs_request_id", table_name="jobs")
    op.drop_column("jobs", "request_id")
