"""Decide: the last decision per partition, so an unchanged partition is not measured again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_partition_stats", sa.Column("last_decision", sa.String(60), nullable=True))
    op.add_column("ao_partition_stats", sa.Column("last_decision_at", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("ao_partition_stats", "last_decision_at")
    op.drop_column("ao_partition_stats", "last_decision")
