"""The door's predicted time to first token, stored on the realtime job it admitted, so the
prediction can be checked against the job's real first token (predicted vs actual, per
request).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("predicted_ttft_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "predicted_ttft_ms")
