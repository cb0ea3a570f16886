"""Job events: what happened to a job beyond its status (preempted, resumed), as a JSONB list.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: writers append with COALESCE(events, '[]'::jsonb) || ..., so
    # existing rows need no rewrite.
    op.add_column("jobs", sa.Column("events", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "events")
