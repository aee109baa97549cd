"""Sharded listeners: live listeners, shard leases with fencing tokens, and pushed notices of new snapshots
(see autooptimize/storage/shard_leases.py and autooptimize/storage/notices.py).

Revision ID: 0011_listener_shards
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_listener_shards"
down_revision = "0010"
branch_labels = None
depends_on = None

TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ao_listener_members",
        sa.Column("catalog", sa.String(200), nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("catalog", "holder", name="pk_ao_listener_members"),
    )
    op.create_table(
        "ao_listener_shards",
        sa.Column("catalog", sa.String(200), nullable=False),
        sa.Column("shard", sa.Integer, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("acquired_at", TS, nullable=False),
        sa.Column("renewed_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("released_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("catalog", "shard", name="pk_ao_listener_shards"),
    )
    op.create_table(
        "ao_listener_notices",
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("notified_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("table_id", name="pk_ao_listener_notices"),
        sa.ForeignKeyConstraint(["table_id"], ["ao_tracked_tables.id"], ondelete="CASCADE",
                                name="fk_ao_listener_notices_table_id_ao_tracked_tables"),
    )


def downgrade() -> None:
    op.drop_table("ao_listener_notices")
    op.drop_table("ao_listener_shards")
    op.drop_table("ao_listener_members")
