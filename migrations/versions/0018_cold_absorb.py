"""``ao_tracked_tables.cold_absorb``: the table's own choice for the cold finish that gives its remainder a
home (``autooptimize.domain.remainder``; ``track --cold-absorb``, AutoAnalyze). NULL: ``AO_COLD_ABSORB``.

Revision ID: 0018_cold_absorb
Revises: 0017_merge_price
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_cold_absorb"
down_revision = "0017_merge_price"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_tracked_tables", sa.Column("cold_absorb", sa.Boolean, nullable=True))


def downgrade() -> None:
    op.drop_column("ao_tracked_tables", "cold_absorb")
