"""Usage rolled up from the job rows (issue #16 part 3): a worker's final write stamps the job
with its own transaction id (`jobs.usage_xid`) instead of upserting `usage_daily` per job; the
dispatcher's upkeep adds every ended job below the oldest running transaction into
`usage_daily` about twice a second, and `usage_rollup` remembers how far it got.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for every job ended before (already counted by the per-job upsert) and every job
    # not ended by a worker (never counted).
    op.add_column("jobs", sa.Column("usage_xid", sa.BigInteger(), nullable=True))
    op.create_index("ix_jobs_usage_xid", "jobs", ["usage_xid"],
                    postgresql_where=sa.text("usage_xid IS NOT NULL"))
    op.create_table(
        "usage_rollup",
        sa.Column("id", sa.SmallInteger(), nullable=False),  # one row: id 1
        sa.Column("last_xid", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_rollup"),
    )
    # Nothing stamped yet: start at the oldest transaction still running.
    op.execute("INSERT INTO usage_rollup (id, last_xid) "
               "VALUES (1, pg_snapshot_xmin(pg_current_snapshot())::text::bigint)")


def downgrade() -> None:
    # Jobs stamped but not rolled up yet are not counted by the older code: roll up first
    # (the dispatcher does, within a second) and stop the workers before downgrading.
    op.drop_table("usage_rollup")
    op.drop_index("ix_jobs_usage_xid", table_name="jobs")
    op.drop_column("jobs", "usage_xid")
