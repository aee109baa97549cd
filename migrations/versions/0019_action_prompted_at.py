"""``ao_actions.prompted_at``: the write that prompted a decided action (its partition's last writer commit
when decide chose it). A table with too few merges of its own borrows its replay's timings from the other
tables' merges, counted from that write (``services.learned_timings.borrowed_timings``). NULL: an ad-hoc
action, or one recorded before this column.

Revision ID: 0019_action_prompted_at
Revises: 0018_cold_absorb
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_action_prompted_at"
down_revision = "0018_cold_absorb"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_actions", sa.Column("prompted_at", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("ao_actions", "prompted_at")
