"""served_models: when each model was first offered (the `created` time of /v1/models).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "served_models",
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("first_served_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_served_models")),
    )


def downgrade() -> None:
    op.drop_table("served_models")
