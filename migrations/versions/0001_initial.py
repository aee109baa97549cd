"""Initial state: tracked tables, partition stats, entropy history, actions, append-only audit log.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ao_tracked_tables",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("catalog", sa.String(200), nullable=False),
        sa.Column("identifier", sa.String(500), nullable=False),
        sa.Column("target_file_size", sa.BigInteger, nullable=False),
        sa.Column("tolerance", sa.BigInteger, nullable=False),
        sa.Column("min_input_files", sa.Integer, nullable=False),
        sa.Column("priority_class", sa.String(50), nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("sort_order", sa.Text, nullable=True),
        sa.Column("allowed_actions", JSONB, nullable=False),
        sa.Column("max_bytes_per_action", sa.BigInteger, nullable=True),
        sa.Column("min_interval_seconds", sa.Integer, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ao_tracked_tables"),
        sa.UniqueConstraint("catalog", "identifier", name="uq_ao_tracked_tables_catalog"),
        sa.CheckConstraint("target_file_size > 0", name="ck_ao_tracked_tables_target_positive"),
        sa.CheckConstraint("tolerance > 0", name="ck_ao_tracked_tables_tolerance_positive"),
        sa.CheckConstraint("weight > 0", name="ck_ao_tracked_tables_weight_positive"),
    )
    op.create_table(
        "ao_partition_stats",
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("spec_id", sa.Integer, nullable=False),
        sa.Column("partition_key", sa.Text, nullable=False),
        sa.Column("partition_values", JSONB, nullable=False),
        sa.Column("n_files", sa.BigInteger, nullable=False),
        sa.Column("sse", sa.Numeric(40, 0), nullable=False),
        sa.Column("total_bytes", sa.BigInteger, nullable=False),
        sa.Column("small_files", sa.BigInteger, nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("updated_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "spec_id", "partition_key", name="pk_ao_partition_stats"),
        sa.ForeignKeyConstraint(
            ["table_id"], ["ao_tracked_tables.id"], ondelete="CASCADE",
            name="fk_ao_partition_stats_table_id_ao_tracked_tables",
        ),
    )
    op.create_table(
        "ao_entropy_history",
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("spec_id", sa.Integer, nullable=False),
        sa.Column("partition_key", sa.Text, nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("n_files", sa.BigInteger, nullable=False),
        sa.Column("sse", sa.Numeric(40, 0), nullable=False),
        sa.Column("mse", sa.Float, nullable=False),
        sa.Column("recorded_at", TS, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ao_entropy_history"),
        sa.ForeignKeyConstraint(
            ["table_id"], ["ao_tracked_tables.id"], ondelete="CASCADE",
            name="fk_ao_entropy_history_table_id_ao_tracked_tables",
        ),
    )
    op.create_index(
        "ix_ao_entropy_history_partition", "ao_entropy_history", ["table_id", "spec_id", "partition_key"]
    )
    op.create_table(
        "ao_actions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("spec_id", sa.Integer, nullable=True),
        sa.Column("partition_key", sa.Text, nullable=True),
        sa.Column("partition_values", JSONB, nullable=True),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("priority_class", sa.String(50), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("reason", sa.String(100), nullable=True),
        sa.Column("options", JSONB, nullable=False),
        sa.Column("plan", JSONB, nullable=True),
        sa.Column("checkpoint", JSONB, nullable=True),
        sa.Column("base_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("committed_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("files_in", sa.Integer, nullable=True),
        sa.Column("files_out", sa.Integer, nullable=True),
        sa.Column("bytes_in", sa.BigInteger, nullable=True),
        sa.Column("bytes_out", sa.BigInteger, nullable=True),
        sa.Column("rows_in", sa.BigInteger, nullable=True),
        sa.Column("rows_out", sa.BigInteger, nullable=True),
        sa.Column("checksum_in", sa.String(100), nullable=True),
        sa.Column("checksum_out", sa.String(100), nullable=True),
        sa.Column("mse_before", sa.Float, nullable=True),
        sa.Column("mse_after", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("timings", JSONB, nullable=False),
        sa.Column("created_at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_ao_actions"),
        sa.ForeignKeyConstraint(
            ["table_id"], ["ao_tracked_tables.id"], ondelete="CASCADE",
            name="fk_ao_actions_table_id_ao_tracked_tables",
        ),
        sa.CheckConstraint(
            "state IN ('queued','running','succeeded','skipped','refused','aborted','failed')",
            name="ck_ao_actions_state_known",
        ),
    )
    op.create_index("ix_ao_actions_table_state", "ao_actions", ["table_id", "state"])
    op.create_index("ix_ao_actions_created_at", "ao_actions", ["created_at"])
    op.create_table(
        "ao_audit_log",
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("at", TS, server_default=sa.func.now(), nullable=False),
        sa.Column("action_id", sa.String(36), nullable=True),
        sa.Column("table_id", sa.Integer, nullable=True),
        sa.Column("event", sa.String(60), nullable=False),
        sa.Column("detail", JSONB, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ao_audit_log"),
    )
    op.create_index("ix_ao_audit_log_action", "ao_audit_log", ["action_id"])
    # Append-only: history that can be edited is not an audit trail.
    op.execute(
        """
        CREATE FUNCTION ao_audit_log_append_only() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION 'ao_audit_log is append-only (% rejected)', TG_OP;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        "CREATE TRIGGER ao_audit_log_no_change BEFORE UPDATE OR DELETE ON ao_audit_log "
        "FOR EACH ROW EXECUTE FUNCTION ao_audit_log_append_only()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS ao_audit_log_no_change ON ao_audit_log")
    op.execute("DROP FUNCTION IF EXISTS ao_audit_log_append_only()")
    op.drop_table("ao_audit_log")
    op.drop_table("ao_actions")
    op.drop_table("ao_entropy_history")
    op.drop_table("ao_partition_stats")
    op.drop_table("ao_tracked_tables")
