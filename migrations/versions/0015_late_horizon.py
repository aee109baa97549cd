"""Each time partition's ordinal and late lag (``ao_partition_stats.ordinal``: the value of its spec's hour,
day, month or year field; ``late_lag``: the most partitions behind the newest of its spec that a write to
it has landed, as the listener saw it). The table's late horizon is the largest late lag of a spec; a
partition further behind the newest than that is finished at once (``AO_LATE_HORIZON_FINISH``,
``autooptimize.domain.policy.past_late_horizon``). NULL for a partition without a time field, or not
written since the listener started keeping them.

Revision ID: 0015_late_horizon
Revises: 0014_write_gaps
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_late_horizon"
down_revision = "0014_write_gaps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_partition_stats", sa.Column("ordinal", sa.BigInteger, nullable=True))
    op.add_column("ao_partition_stats", sa.Column("late_lag", sa.Integer, nullable=True))


def downgrade() -> None:
    op.drop_column("ao_partition_stats", "late_lag")
    op.drop_column("ao_partition_stats", "ordinal")
