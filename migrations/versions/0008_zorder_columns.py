"""Z-order: the tuning's key columns (``track --zorder-columns a,b``), and the zorder kind allowed
wherever sort is.

A table tracked before this revision has an allowed-actions list written without the zorder kind;
one that allows sort (every rewrite kind's default) gets zorder too, so naming z-order columns is
enough for decide to offer it. Nothing is offered to a table whose tuning names no z-order columns.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_tracked_tables", sa.Column("zorder_columns", sa.Text, nullable=True))
    op.execute("UPDATE ao_tracked_tables SET allowed_actions = allowed_actions || '[\"zorder\"]'::jsonb "
               "WHERE allowed_actions ? 'sort' AND NOT allowed_actions ? 'zorder'")


def downgrade() -> None:
    op.execute("UPDATE ao_tracked_tables SET allowed_actions = allowed_actions - 'zorder'")
    op.drop_column("ao_tracked_tables", "zorder_columns")
