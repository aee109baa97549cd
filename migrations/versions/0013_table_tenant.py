"""Tenants: a tracked table's ``tenant`` (``track --tenant``), the level between priority class and table in
the fair dispatch. NULL: the first level of the table's namespace.

Revision ID: 0013_tenant
Revises: 0012_budget
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_tenant"
down_revision = "0012_budget"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ao_tracked_tables", sa.Column("tenant", sa.String(63), nullable=True))


def downgrade() -> None:
    op.drop_column("ao_tracked_tables", "tenant")
