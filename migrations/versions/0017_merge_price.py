"""``ao_tracked_tables.merge_price``: the table's own price for the priced live rule
(``autooptimize.domain.priced``; ``track --merge-price``, AutoAnalyze). NULL: ``AO_MERGE_PRICE``; 0: the tiers.

Revision ID: 0017_merge_price
Revises: 0016_spec_spans
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_merge_price"
down_revision = "0016_spec_spans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_tracked_tables", sa.Column("merge_price", sa.Integer, nullable=True))


def downgrade() -> None:
    op.drop_column("ao_tracked_tables", "merge_price")
