"""Tenancy: tiers (seeded), tenant quota overrides, daily usage, audit log; tenants.tier -> FK.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

# A copy, not an import: a migration must not change when application code does.
SEED_TIERS = [
    ("free", 0.5, ["auto", "default", "flex"], 3000, 200,
     {"requests_per_minute": 20, "tokens_per_minute": 20_000, "concurrent_requests": 2,
      "batch_enqueued_tokens": 200_000, "monthly_tokens": 1_000_000,
      "monthly_alert_percent": 80}),
    ("standard", 1.0, ["auto", "default", "flex", "priority"], 1000, 100,
     {"requests_per_minute": 3_000, "tokens_per_minute": 2_000_000, "concurrent_requests": 256,
      "batch_enqueued_tokens": 50_000_000, "monthly_tokens": None,
      "monthly_alert_percent": 80}),
    ("premium", 2.0, ["auto", "default", "flex", "priority"], 500, 50,
     {"requests_per_minute": 6_000, "tokens_per_minute": 5_000_000, "concurrent_requests": 512,
      "batch_enqueued_tokens": 200_000_000, "monthly_tokens": None,
      "monthly_alert_percent": 80}),
    ("enterprise", 4.0, ["auto", "default", "flex", "priority"], 300, 40,
     {"requests_per_minute": None, "tokens_per_minute": None, "concurrent_requests": 2_048,
      "batch_enqueued_tokens": None, "monthly_tokens": None, "monthly_alert_percent": 80}),
]


def upgrade() -> None:
    tiers = op.create_table(
        "tiers",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("allowed_service_tiers", postgresql.JSONB(), nullable=False),
        sa.Column("ttft_slo_ms", sa.Integer(), nullable=False),
        sa.Column("tpot_slo_ms", sa.Integer(), nullable=False),
        sa.Column("quotas", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tiers")),
    )
    op.bulk_insert(tiers, [
        {"name": n, "weight": w, "allowed_service_tiers": allowed, "ttft_slo_ms": ttft,
         "tpot_slo_ms": tpot, "quotas": quotas}
        for n, w, allowed, ttft, tpot, quotas in SEED_TIERS])
    # Tenants may name a tier nobody defined yet (the tier column was free text): give each
    # such name the standard tier's settings so the foreign key can hold.
    op.execute(sa.text(
        "INSERT INTO tiers (name, weight, allowed_service_tiers, ttft_slo_ms, tpot_slo_ms, quotas)"
        " SELECT DISTINCT t.tier, s.weight, s.allowed_service_tiers, s.ttft_slo_ms,"
        " s.tpot_slo_ms, s.quotas FROM tenants t CROSS JOIN tiers s"
        " WHERE s.name = 'standard' AND t.tier NOT IN (SELECT name FROM tiers)"))
    op.create_foreign_key(op.f("fk_tenants_tier_tiers"), "tenants", "tiers", ["tier"], ["name"],
                          onupdate="CASCADE")
    op.create_table(
        "tenant_quotas",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("overrides", postgresql.JSONB(), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_tenant_quotas_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenant_quotas")),
    )
    op.create_table(
        "usage_daily",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("job_class", sa.String(16), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("failed_requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_usage_daily_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", "day", "model", "job_class",
                                name=op.f("pk_usage_daily")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_type", sa.String(32), nullable=False),
        sa.Column("target_id", sa.String(64), nullable=False),
        sa.Column("details", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_target", "audit_log", ["target_type", "target_id"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("usage_daily")
    op.drop_table("tenant_quotas")
    op.drop_constraint(op.f("fk_tenants_tier_tiers"), "tenants", type_="foreignkey")
    op.drop_table("tiers")


