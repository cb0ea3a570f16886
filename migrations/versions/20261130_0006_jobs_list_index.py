"""Listing a tenant's jobs page by page (GET /v1/jobs): one index on (tenant_id, created_at, id).

The list is ordered by (created_at, id) descending and its cursor compares that pair, so the
index serves each page as one range scan. It replaces (tenant_id, created_at), its prefix.
Built CONCURRENTLY (outside the migration's transaction), so a large jobs table stays
writable while it builds.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_jobs_tenant_created_id", "jobs", ["tenant_id", "created_at", "id"],
                        postgresql_concurrently=True, if_not_exists=True)
        op.drop_index("ix_jobs_tenant_created", table_name="jobs",
                      postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_jobs_tenant_created", "jobs", ["tenant_id", "created_at"],
                        postgresql_concurrently=True, if_not_exists=True)
        op.drop_index("ix_jobs_tenant_created_id", table_name="jobs",
                      postgresql_concurrently=True, if_exists=True)
