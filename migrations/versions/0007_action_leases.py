"""Fencing: one lease per action with a fencing token from a sequence (see autooptimize/storage/leases.py).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Numbered 0006 when it was written, beside 0006_safe_hygiene_defaults; both reached main in the same
hour and alembic cannot tell two revisions of one id apart, so this one follows the other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.execute(sa.schema.CreateSequence(sa.Sequence("ao_lease_tokens")))
    op.create_table(
        "ao_action_leases",
        sa.Column("action_id", sa.String(36), nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("acquired_at", TS, nullable=False),
        sa.Column("renewed_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("released_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("action_id", name="pk_ao_action_leases"),
        sa.ForeignKeyConstraint(["action_id"], ["ao_actions.id"], ondelete="CASCADE",
                                name="fk_ao_action_leases_action_id_ao_actions"),
    )


def downgrade() -> None:
    op.drop_table("ao_action_leases")
    op.execute(sa.schema.DropSequence(sa.Sequence("ao_lease_tokens")))
