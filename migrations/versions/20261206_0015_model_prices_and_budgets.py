"""Prices per model and class, and budgets in money.

`model_prices` holds every version of a model's prices (appended, never updated): a job is
charged by the version in force when it ended. `tenant_budgets` holds a tenant's monthly
budget, its alert thresholds and whether 100% stops it; `budget_alerts` one row per alert
sent (tenant, month, threshold), so each is sent once.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(18, 6)
PERCENT = sa.Numeric(5, 2)


def upgrade() -> None:
    op.create_table(
        "model_prices",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("input_per_mtok", MONEY, nullable=True),
        sa.Column("output_per_mtok", MONEY, nullable=True),
        sa.Column("batch_discount_pct", PERCENT, nullable=False),
        sa.Column("flex_discount_pct", PERCENT, nullable=False),
        sa.Column("batch_input_per_mtok", MONEY, nullable=True),
        sa.Column("batch_output_per_mtok", MONEY, nullable=True),
        sa.Column("flex_input_per_mtok", MONEY, nullable=True),
        sa.Column("flex_output_per_mtok", MONEY, nullable=True),
        sa.Column("effective_from", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_prices")),
        sa.CheckConstraint("batch_discount_pct BETWEEN 0 AND 100 "
                           "AND flex_discount_pct BETWEEN 0 AND 100",
                           name=op.f("ck_model_prices_discounts")),
    )
    op.create_index("ix_model_prices_model_from", "model_prices", ["model", "effective_from"])
    op.create_table(
        "tenant_budgets",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("monthly_limit", MONEY, nullable=False),
        sa.Column("thresholds", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("hard_stop", sa.Boolean(), nullable=False),
        sa.Column("stopped_month", sa.Date(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_tenant_budgets_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenant_budgets")),
    )
    op.create_table(
        "budget_alerts",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("threshold_pct", sa.Integer(), nullable=False),
        sa.Column("spend", MONEY, nullable=False),
        sa.Column("monthly_limit", MONEY, nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_budget_alerts_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", "month", "threshold_pct",
                                name=op.f("pk_budget_alerts")),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts")
    op.drop_table("tenant_budgets")
    op.drop_index("ix_model_prices_model_from", table_name="model_prices")
    op.drop_table("model_prices")
