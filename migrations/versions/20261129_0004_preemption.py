"""Preemption records on jobs: count, tokens recomputed, time parked, generated-token offset.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("preemptions", sa.Integer(), server_default="0",
                                    nullable=False))
    op.add_column("jobs", sa.Column("recomputed_tokens", sa.Integer(), server_default="0",
                                    nullable=False))
    op.add_column("jobs", sa.Column("parked_seconds", sa.Float(), server_default="0",
                                    nullable=False))
    op.add_column("jobs", sa.Column("preempted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "preempted_at")
    op.drop_column("jobs", "parked_seconds")
    op.drop_column("jobs", "recomputed_tokens")
    op.drop_column("jobs", "preemptions")
