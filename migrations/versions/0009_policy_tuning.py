"""The partition's small bytes (the health rule) and the per-table merge tuning (AutoAnalyze).

``ao_partition_stats.small_bytes``: Σ bytes of the files under the target, kept by the listener like
``small_files``; with it the one health rule (``domain.entropy.partition_needs_attention``) judges the
excess over the best layout a partition's bytes allow. Rows written before this revision hold 0, so every
table's cursor is marked for a rescan, which rebuilds the figures exactly.

``ao_tracked_tables``: the merge tuning the table runs with (NULL: the service's defaults), whether
AutoAnalyze may apply its suggestion (``auto_tune``), and the last suggestion with its predicted figures.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_partition_stats", sa.Column("small_bytes", sa.BigInteger, nullable=False, server_default="0"))
    op.execute("UPDATE ao_table_cursors SET needs_scan = true, scan_reason = 'small_bytes added (migration 0009)'")
    op.add_column("ao_tracked_tables", sa.Column("merge_fan_in", sa.Integer, nullable=True))
    op.add_column("ao_tracked_tables", sa.Column("cold_after_seconds", sa.Float, nullable=True))
    op.add_column("ao_tracked_tables", sa.Column("leave_alone_below", sa.BigInteger, nullable=True))
    op.add_column("ao_tracked_tables", sa.Column("auto_tune", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("ao_tracked_tables", sa.Column("suggested_tuning", JSONB, nullable=True))
    op.add_column("ao_tracked_tables", sa.Column("suggested_at", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    for column in ("suggested_at", "suggested_tuning", "auto_tune", "leave_alone_below", "cold_after_seconds",
                   "merge_fan_in"):
        op.drop_column("ao_tracked_tables", column)
    op.drop_column("ao_partition_stats", "small_bytes")
