"""Files and batches: the files table, the batches table, and batch columns on jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("line_count", sa.Integer(), nullable=True),
        sa.Column("storage_key", sa.String(512), nullable=False),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_files_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_tenant_created", "files", ["tenant_id", "created_at"])
    op.create_table(
        "batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("input_file_id", sa.Uuid(), nullable=True),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("metadata", postgresql.JSONB(), nullable=True),
        sa.Column("errors", postgresql.JSONB(), nullable=True),
        sa.Column("output_file_id", sa.Uuid(), nullable=True),
        sa.Column("error_file_id", sa.Uuid(), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("invalid_lines", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("final_counts", postgresql.JSONB(), nullable=True),
        sa.Column("usage", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("in_progress_at", TS, nullable=True),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("finalizing_at", TS, nullable=True),
        sa.Column("completed_at", TS, nullable=True),
        sa.Column("failed_at", TS, nullable=True),
        sa.Column("expired_at", TS, nullable=True),
        sa.Column("cancelling_at", TS, nullable=True),
        sa.Column("cancelled_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_batches_tenant_id_tenants")),
        sa.ForeignKeyConstraint(["input_file_id"], ["files.id"], ondelete="SET NULL",
                                name=op.f("fk_batches_input_file_id_files")),
        sa.ForeignKeyConstraint(["output_file_id"], ["files.id"], ondelete="SET NULL",
                                name=op.f("fk_batches_output_file_id_files")),
        sa.ForeignKeyConstraint(["error_file_id"], ["files.id"], ondelete="SET NULL",
                                name=op.f("fk_batches_error_file_id_files")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index("ix_batches_tenant_created", "batches", ["tenant_id", "created_at"])
    op.create_index("ix_batches_open", "batches", ["status"],
                    postgresql_where=sa.text(
                        "status IN ('validating', 'in_progress', 'finalizing', 'cancelling')"))
    op.add_column("jobs", sa.Column("batch_id", sa.Uuid(), nullable=True))
    op.add_column("jobs", sa.Column("custom_id", sa.String(512), nullable=True))
    op.add_column("jobs", sa.Column("line_no", sa.Integer(), nullable=True))
    op.create_foreign_key(op.f("fk_jobs_batch_id_batches"), "jobs", "batches", ["batch_id"],
                          ["id"], ondelete="CASCADE")
    op.create_index("ix_jobs_batch_status", "jobs", ["batch_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_batch_status", table_name="jobs")
    op.drop_constraint(op.f("fk_jobs_batch_id_batches"), "jobs", type_="foreignkey")
    op.drop_column("jobs", "line_no")
    op.drop_column("jobs", "custom_id")
    op.drop_column("jobs", "batch_id")
    op.drop_table("batches")
    op.drop_table("files")
