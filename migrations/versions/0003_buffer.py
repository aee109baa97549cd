"""Buffered writes: buffered tables with their rules, landed files, consolidation batches.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ao_buffer_tables",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("catalog", sa.String(200), nullable=False),
        sa.Column("identifier", sa.String(500), nullable=False),
        sa.Column("max_age_seconds", sa.Integer, nullable=True),
        sa.Column("min_bytes", sa.BigInteger, nullable=True),
        sa.Column("max_bytes", sa.BigInteger, nullable=True),
        sa.Column("max_files", sa.Integer, nullable=True),
        sa.Column("combinable", sa.Boolean, server_default=sa.true(), nullable=False),
        sa.Column("callback_url", sa.Text, nullable=True),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ao_buffer_tables"),
        sa.UniqueConstraint("catalog", "identifier", name="uq_ao_buffer_tables_catalog"),
        sa.CheckConstraint(
            "(max_age_seconds IS NULL OR max_age_seconds > 0) AND (min_bytes IS NULL OR min_bytes >= 0) "
            "AND (max_bytes IS NULL OR max_bytes > 0) AND (max_files IS NULL OR max_files > 0)",
            name="ck_ao_buffer_tables_positive_rules",
        ),
    )
    op.create_table(
        "ao_buffer_files",
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("buffer_table_id", sa.Integer, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("partitions", JSONB, nullable=False),
        sa.Column("schema_fp", sa.String(64), nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("arrived_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_ao_buffer_files"),
        sa.UniqueConstraint("path", name="uq_ao_buffer_files_path"),
        sa.ForeignKeyConstraint(["buffer_table_id"], ["ao_buffer_tables.id"], ondelete="CASCADE",
                                name="fk_ao_buffer_files_buffer_table_id_ao_buffer_tables"),
        sa.CheckConstraint("state IN ('buffered', 'claimed', 'committed', 'quarantined')",
                           name="ck_ao_buffer_files_state"),
        # a claimed or committed file always names its batch
        sa.CheckConstraint("state NOT IN ('claimed', 'committed') OR batch_id IS NOT NULL",
                           name="ck_ao_buffer_files_batch"),
    )
    op.create_index("ix_ao_buffer_files_table_state_arrived", "ao_buffer_files",
                    ["buffer_table_id", "state", "arrived_at"])
    op.create_index("ix_ao_buffer_files_batch", "ao_buffer_files", ["batch_id"])
    op.create_table(
        "ao_buffer_batches",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("buffer_table_id", sa.Integer, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("trigger", sa.String(40), nullable=False),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("bytes_in", sa.BigInteger, nullable=False),
        sa.Column("rows_in", sa.BigInteger, nullable=False),
        sa.Column("files_out", sa.Integer, nullable=True),
        sa.Column("bytes_out", sa.BigInteger, nullable=True),
        sa.Column("rows_out", sa.BigInteger, nullable=True),
        sa.Column("checksum_in", sa.String(100), nullable=True),
        sa.Column("checksum_out", sa.String(100), nullable=True),
        sa.Column("checkpoint", JSONB, nullable=True),
        sa.Column("committed_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("timings", JSONB, nullable=False),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("committed_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_ao_buffer_batches"),
        sa.ForeignKeyConstraint(["buffer_table_id"], ["ao_buffer_tables.id"], ondelete="CASCADE",
                                name="fk_ao_buffer_batches_buffer_table_id_ao_buffer_tables"),
        sa.CheckConstraint("state IN ('claimed', 'written', 'committed', 'done', 'empty')",
                           name="ck_ao_buffer_batches_state"),
    )
    op.create_index("ix_ao_buffer_batches_table_state", "ao_buffer_batches", ["buffer_table_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_ao_buffer_batches_table_state", table_name="ao_buffer_batches")
    op.drop_table("ao_buffer_batches")
    op.drop_index("ix_ao_buffer_files_batch", table_name="ao_buffer_files")
    op.drop_index("ix_ao_buffer_files_table_state_arrived", table_name="ao_buffer_files")
    op.drop_table("ao_buffer_files")
    op.drop_table("ao_buffer_tables")
