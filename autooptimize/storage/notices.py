"""Pushed notices of new snapshots (``ao_listener_notices``): what ``autooptimize notify`` leaves for the
listener, so a notice is not lost when the wake-up message is (Redis down, no listener subscribed).

One row per table: a newer notice replaces an older one. The listener reads the notices of its shards on
every pass, observes those tables whatever its poll schedule says, and clears a notice only if it was not
renewed meanwhile (:func:`clear_notice`). Functions take a Session and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Notice:
    """A table a writer or an event consumer said has a new snapshot (``snapshot_id`` when it said which)."""

    table_id: int
    identifier: str
    snapshot_id: int | None
    notified_at: datetime


def add_notice(session: Session, table_id: int, snapshot_id: int | None) -> datetime:
    """Record (or renew) the notice of ``table_id``; returns its time (PostgreSQL's clock)."""
    return session.execute(text("""
        INSERT INTO ao_listener_notices (table_id, snapshot_id, notified_at)
        VALUES (:t, :s, clock_timestamp())
        ON CONFLICT (table_id) DO UPDATE SET snapshot_id = EXCLUDED.snapshot_id, notified_at = EXCLUDED.notified_at
        RETURNING notified_at
    """), {"t": int(table_id), "s": snapshot_id}).scalar_one()


def pending_notices(session: Session, catalog: str) -> list[Notice]:
    """The notices of ``catalog``'s enabled tracked tables, oldest first."""
    rows = session.execute(text("""
        SELECT n.table_id, t.identifier, n.snapshot_id, n.notified_at
        FROM ao_listener_notices n JOIN ao_tracked_tables t ON t.id = n.table_id
        WHERE t.catalog = :c AND t.enabled
        ORDER BY n.notified_at, t.identifier
    """), {"c": catalog})
    return [Notice(int(r.table_id), r.identifier, r.snapshot_id, r.notified_at) for r in rows]


def clear_notice(session: Session, notice: Notice) -> bool:
    """Remove ``notice`` once acted on, unless a newer one replaced it meanwhile."""
    return session.execute(text("""
        DELETE FROM ao_listener_notices WHERE table_id = :t AND notified_at <= :at RETURNING table_id
    """), {"t": notice.table_id, "at": notice.notified_at}).scalar() is not None
