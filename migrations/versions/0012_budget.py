"""The budget's record: ``ao_budget_decisions``, one row per automatic candidate judged by the budget
(value, estimated core-seconds, verdict, the action it became); see autooptimize/services/budget.py.

Revision ID: 0012_budget
Revises: 0011_listener_shards
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_budget"
down_revision = "0011_listener_shards"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ao_budget_decisions",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("table_id", sa.Integer(), sa.ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("spec_id", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("mode", sa.String(10), nullable=False),
        sa.Column("files_removed", sa.BigInteger(), nullable=False),
        sa.Column("distance_closed", sa.Float(), nullable=False),
        sa.Column("files_in", sa.BigInteger(), nullable=False),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(10), nullable=False),
        sa.Column("reason", sa.String(40), nullable=True),
        sa.Column("deferrals", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("budget", sa.Float(), nullable=True),
        sa.Column("spent", sa.Float(), nullable=True),
        sa.Column("action_id", sa.String(36), nullable=True),
        sa.Column("arrived_at", sa.TIMESTAMP(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("decided_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("admitted_at", sa.TIMESTAMP(timezone=True), nullable=True),
    )
    op.create_index("ix_ao_budget_decisions_open", "ao_budget_decisions", ["verdict", "arrived_at"])
    op.create_index("ix_ao_budget_decisions_admitted_at", "ao_budget_decisions", ["admitted_at"])
    op.create_index("ix_ao_budget_decisions_partition", "ao_budget_decisions",
                    ["table_id", "spec_id", "partition_key"])
    op.create_index("ix_ao_budget_decisions_action", "ao_budget_decisions", ["action_id"])


def downgrade() -> None:
    op.drop_table("ao_budget_decisions")
