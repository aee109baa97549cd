"""Each time-partitioned spec's span, kept as the listener sees writes (``ao_spec_spans``): the newest and
oldest ordinal of its partitions and its late horizon (the most partitions behind the newest that a write
has landed). Read by the late-horizon finish (``storage.write_clock``; the listener's recheck of settled
partitions joins it), instead of aggregating every partition of the table on each read: at 10,000
tables of 48 hours that aggregate took 3.1 s per listener pass, 311 ms at 1,000
(benchmarks/settled_query.py). Filled from ``ao_partition_stats``.

Revision ID: 0016_spec_spans
Revises: 0015_late_horizon
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_spec_spans"
down_revision = "0015_late_horizon"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ao_spec_spans",
        sa.Column("table_id", sa.Integer, sa.ForeignKey("ao_tracked_tables.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("spec_id", sa.Integer, primary_key=True),
        sa.Column("newest", sa.BigInteger, nullable=False),
        sa.Column("oldest", sa.BigInteger, nullable=False),
        sa.Column("horizon", sa.Integer, nullable=True),
    )
    op.execute(
        "INSERT INTO ao_spec_spans (table_id, spec_id, newest, oldest, horizon) "
        "SELECT table_id, spec_id, max(ordinal), min(ordinal), max(late_lag) FROM ao_partition_stats "
        "WHERE ordinal IS NOT NULL GROUP BY table_id, spec_id"
    )


def downgrade() -> None:
    op.drop_table("ao_spec_spans")
