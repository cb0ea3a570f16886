"""A plan's over-quota mode: `refuse` (the default, the rule before this revision) answers a
realtime request past its rate limits with 429; `overflow` runs it at batch priority when
capacity is idle instead (the monthly token budget binds either way).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tiers", sa.Column("over_quota", sa.String(8), nullable=False,
                                     server_default="refuse"))
    op.create_check_constraint(op.f("ck_tiers_over_quota"), "tiers",
                               "over_quota IN ('refuse', 'overflow')")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_tiers_over_quota"), "tiers", type_="check")
    op.drop_column("tiers", "over_quota")
