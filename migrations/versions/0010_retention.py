"""Bounded state: the audit log's append-only trigger admits the retention job's deletes (and nothing
else), and the indexes the retention job prunes by.

A DELETE on ``ao_audit_log`` passes only in a transaction that set ``ao.retention = 'on'`` (``SET LOCAL``),
which only autooptimize.services.retention does; UPDATE stays rejected.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE OR REPLACE FUNCTION ao_audit_log_append_only() RETURNS trigger AS $$
        BEGIN
            IF TG_OP = 'DELETE' AND current_setting('ao.retention', true) = 'on' THEN
                RETURN OLD;
            END IF;
            RAISE EXCEPTION 'ao_audit_log is append-only (% rejected)', TG_OP;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    op.create_index("ix_ao_audit_log_at", "ao_audit_log", ["at"])
    op.create_index("ix_ao_entropy_history_recorded_at", "ao_entropy_history", ["recorded_at"])
    op.create_index("ix_ao_actions_finished_at", "ao_actions", ["finished_at"])
    op.create_index("ix_ao_buffer_batches_finished_at", "ao_buffer_batches", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_ao_buffer_batches_finished_at", "ao_buffer_batches")
    op.drop_index("ix_ao_actions_finished_at", "ao_actions")
    op.drop_index("ix_ao_entropy_history_recorded_at", "ao_entropy_history")
    op.drop_index("ix_ao_audit_log_at", "ao_audit_log")
    op.execute(
        """
        CREATE OR REPLACE FUNCTION ao_audit_log_append_only() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION 'ao_audit_log is append-only (% rejected)', TG_OP;
        END;
        $$ LANGUAGE plpgsql
        """
    )
