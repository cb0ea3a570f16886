"""A plan's admission mode for realtime: `queue` (the default) admits a request while its
predicted wait before it starts is within the plan's `max_queue_wait_ms`, its TTFT target
then only ordering work; `shed` refuses one predicted to miss the TTFT target (the rule
before this revision, kept for tenants who would rather fail fast).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tiers", sa.Column("admission_mode", sa.String(8), nullable=False,
                                     server_default="queue"))
    op.add_column("tiers", sa.Column("max_queue_wait_ms", sa.Integer(), nullable=False,
                                     server_default="30000"))
    op.create_check_constraint(op.f("ck_tiers_admission_mode"), "tiers",
                               "admission_mode IN ('queue', 'shed')")
    op.create_check_constraint(op.f("ck_tiers_max_queue_wait_ms"), "tiers",
                               "max_queue_wait_ms > 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_tiers_max_queue_wait_ms"), "tiers", type_="check")
    op.drop_constraint(op.f("ck_tiers_admission_mode"), "tiers", type_="check")
    op.drop_column("tiers", "max_queue_wait_ms")
    op.drop_column("tiers", "admission_mode")
