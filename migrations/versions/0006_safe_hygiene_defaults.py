"""Destructive hygiene off by default: tables that allowed every action kind (the old default) no
longer allow expire_snapshots and remove_orphans until someone allows them per table.

Before this revision a table tracked for any reason (``track``, ``scan``, a dry run) allowed every
kind, and beat then expired its snapshots and removed its orphan files. The old default cannot be told
apart from a list someone wrote out in full, so every table allowing all six kinds loses the two
destructive ones; a table whose list was narrowed keeps it exactly. Each change is written to the audit
log (``table.tuned`` with ``migration: 0006``), which is also how the downgrade finds the tables to
give them back. ``autooptimize track T --allow expire_snapshots,remove_orphans`` turns them on again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

OLD_DEFAULT = {"merge", "sort", "rewrite_manifests", "expire_snapshots", "remove_orphans", "compact_deletes"}
DESTRUCTIVE = ("expire_snapshots", "remove_orphans")


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, identifier, allowed_actions FROM ao_tracked_tables")).all()
    for table_id, identifier, allowed in rows:
        if set(allowed or ()) != OLD_DEFAULT:
            continue
        kept = [a for a in allowed if a not in DESTRUCTIVE]
        conn.execute(sa.text("UPDATE ao_tracked_tables SET allowed_actions = CAST(:a AS jsonb) WHERE id = :id"),
                     {"a": json.dumps(kept), "id": table_id})
        conn.execute(
            sa.text("INSERT INTO ao_audit_log (table_id, event, detail) VALUES (:id, 'table.tuned', CAST(:d AS jsonb))"),
            {"id": table_id, "d": json.dumps({"identifier": identifier, "migration": revision,
                                              "disallowed": list(DESTRUCTIVE), "allowed_actions": kept})},
        )


def downgrade() -> None:
    conn = op.get_bind()
    changed = conn.execute(sa.text(
        "SELECT DISTINCT table_id FROM ao_audit_log WHERE event = 'table.tuned' AND detail->>'migration' = :r"
    ), {"r": revision}).scalars().all()
    for table_id in changed:
        allowed = conn.execute(sa.text("SELECT allowed_actions FROM ao_tracked_tables WHERE id = :id"),
                               {"id": table_id}).scalar()
        if allowed is None:
            continue
        restored = list(allowed) + [a for a in DESTRUCTIVE if a not in allowed]
        conn.execute(sa.text("UPDATE ao_tracked_tables SET allowed_actions = CAST(:a AS jsonb) WHERE id = :id"),
                     {"a": json.dumps(restored), "id": table_id})
