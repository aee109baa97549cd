"""Partition identity: partitions are keyed by the JSON of their Iceberg values, not their path text.

Stats stored under the old keys cannot be matched to the new ones without the table's spec, so they
are dropped and every tracked table is marked for a scan: the listener recomputes them exactly from the
current snapshot on its next pass (the same path as a table seen for the first time).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM ao_partition_stats")
    op.execute("UPDATE ao_table_cursors SET needs_scan = true, scan_reason = 'partition identity changed (0005)'")


def downgrade() -> None:
    op.execute("DELETE FROM ao_partition_stats")
    op.execute("UPDATE ao_table_cursors SET needs_scan = true, scan_reason = 'downgraded from 0005'")
