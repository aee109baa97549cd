"""Each partition's recent gaps between writes (``ao_partition_stats.write_gaps``, seconds, newest first, at
most 3): the partition's own cold-after time, sooner than its table's once its writes came close together
(``autooptimize.domain.policy.partition_cold_after``). NULL until the listener has seen two writes.
``ao_tracked_tables.cold_gap_factor``: the table's own factor (``track --cold-gap-factor``, AutoAnalyze);
NULL: AO_COLD_GAP_FACTOR.

Revision ID: 0014_write_gaps
Revises: 0013_tenant
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014_write_gaps"
down_revision = "0013_tenant"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_partition_stats", sa.Column("write_gaps", postgresql.ARRAY(sa.Float), nullable=True))
    op.add_column("ao_tracked_tables", sa.Column("cold_gap_factor", sa.Float, nullable=True))


def downgrade() -> None:
    op.drop_column("ao_tracked_tables", "cold_gap_factor")
    op.drop_column("ao_partition_stats", "write_gaps")
