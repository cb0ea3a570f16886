"""The SLO a realtime job was admitted under: its plan's name and TTFT/TPOT targets, stored on
the job, so attainment is judged against the promise made when it arrived, not the plan the
tenant is on (or the plan's targets) when someone looks. Rows from before carry none and are
judged against their tenant's current plan, as before.

An index on when jobs ended: the SLO and fairness windows read the recently ended jobs, and
the dispatcher does so every few seconds.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("slo_plan", sa.String(32), nullable=True))
    op.add_column("jobs", sa.Column("ttft_slo_ms", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("tpot_slo_ms", sa.Integer(), nullable=True))
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"],
                    postgresql_where=sa.text("finished_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", table_name="jobs")
    op.drop_column("jobs", "tpot_slo_ms")
    op.drop_column("jobs", "ttft_slo_ms")
    op.drop_column("jobs", "slo_plan")
