"""Per-key policy: limits, a model allow-list and an expiry.

Each limit is optional (null: only the tenant's applies) and counted per key beside the
tenant's; ``allowed_models`` null means every model the tenant may use. The expiry is the
existing ``expires_at``, now editable.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

LIMITS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests")


def upgrade() -> None:
    for column in LIMITS:
        op.add_column("api_keys", sa.Column(column, sa.Integer(), nullable=True))
        op.create_check_constraint(op.f(f"ck_api_keys_{column}_positive"), "api_keys",
                                   f"{column} IS NULL OR {column} >= 1")
    op.add_column("api_keys", sa.Column("allowed_models", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "allowed_models")
    for column in reversed(LIMITS):
        op.drop_constraint(op.f(f"ck_api_keys_{column}_positive"), "api_keys", type_="check")
        op.drop_column("api_keys", column)
