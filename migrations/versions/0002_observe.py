"""Observe: a per-table snapshot cursor, once-only history of snapshots, non-negative stats.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ao_table_cursors",
        sa.Column("table_id", sa.Integer, nullable=False),
        # The last snapshot whose changes ao_partition_stats holds (None: the table had no snapshot).
        sa.Column("last_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("last_sequence_number", sa.BigInteger, nullable=True),
        # The metadata file last seen; the listener compares it with the catalog's to find changes.
        sa.Column("metadata_location", sa.Text, nullable=True),
        sa.Column("table_uuid", sa.String(36), nullable=True),
        # The target the stats were computed against; a re-tuned target needs a scan.
        sa.Column("target_file_size", sa.BigInteger, nullable=True),
        sa.Column("needs_scan", sa.Boolean, server_default=sa.false(), nullable=False),
        sa.Column("scan_reason", sa.String(200), nullable=True),
        sa.Column("snapshots_applied", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("scans", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("attention_enqueued", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("skipped_below_threshold", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("skipped_pending", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("last_error_at", TS, nullable=True),
        sa.Column("observed_at", TS, nullable=True),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", name="pk_ao_table_cursors"),
        sa.ForeignKeyConstraint(
            ["table_id"], ["ao_tracked_tables.id"], ondelete="CASCADE",
            name="fk_ao_table_cursors_table_id_ao_tracked_tables",
        ),
    )
    # A snapshot's effect on a partition is recorded once: replaying it fails instead of counting twice.
    # Scans may be recorded again at the same snapshot, so the index covers snapshot rows only.
    op.create_index(
        "uq_ao_entropy_history_snapshot",
        "ao_entropy_history",
        ["table_id", "spec_id", "partition_key", "snapshot_id"],
        unique=True,
        postgresql_where=sa.text("source = 'snapshot'"),
    )
    op.create_index("ix_ao_entropy_history_table_snapshot", "ao_entropy_history", ["table_id", "snapshot_id"])
    # A rolling update that would go negative means the figure drifted: fail and scan, never store it.
    op.create_check_constraint(
        "ck_ao_partition_stats_non_negative",
        "ao_partition_stats",
        "n_files >= 0 AND sse >= 0 AND total_bytes >= 0 AND small_files >= 0 AND small_files <= n_files",
    )


def downgrade() -> None:
    op.drop_constraint("ck_ao_partition_stats_non_negative", "ao_partition_stats", type_="check")
    op.drop_index("ix_ao_entropy_history_table_snapshot", table_name="ao_entropy_history")
    op.drop_index("uq_ao_entropy_history_snapshot", table_name="ao_entropy_history")
    op.drop_table("ao_table_cursors")
