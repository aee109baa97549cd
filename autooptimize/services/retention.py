"""Bounded state: what the service keeps in PostgreSQL, and for how long (AO_RETENTION_*).

Beat runs :func:`apply_retention` every AO_RETENTION_SWEEP_SECONDS. It removes, in batches of at most
:data:`BATCH` rows per transaction so that it never holds long locks:

* audit records older than AO_RETENTION_AUDIT_DAYS (the log's append-only trigger admits these deletes
  only inside a transaction that sets ``ao.retention``, which only this module does);
* finished actions (terminal state) older than AO_RETENTION_ACTION_DAYS, their leases with them; a queued
  or running action is never removed, whatever its age;
* released leases of finished actions older than a day (the action row keeps its outcome);
* buffer batches finished (done or empty) more than AO_RETENTION_BUFFER_DAYS ago, and buffer files whose
  rows are committed or quarantined and whose batch is gone or finished that long ago;
* entropy history: older than AO_RETENTION_HISTORY_FULL_DAYS it is thinned to the last row of each
  partition and hour; older than AO_RETENTION_HISTORY_DAYS it goes;
* statistics of partitions gone from their table: a row left with no file (observing deletes those at
  once; a row of an older version or a crash may remain) untouched for AO_RETENTION_GONE_PARTITION_DAYS,
  and every partition row of a table the catalog has no longer had for that long (its cursor's last
  observation failed with TableNotFound that long ago and nothing was observed since).

Nothing here touches a table's files or tuning. docs/reliability.md gives the rows
written per 1,000 commits and what remains after retention.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import text

from autooptimize.config import Settings
from autooptimize.storage.db import session_scope

log = logging.getLogger(__name__)

DAY = 86400.0
#: Rows removed per transaction (each statement repeats until it removes fewer).
BATCH = 5000

_TERMINAL = "('succeeded', 'skipped', 'refused', 'aborted', 'failed')"

_STATEMENTS: dict[str, str] = {
    "audit": """
        DELETE FROM ao_audit_log WHERE id IN (
            SELECT id FROM ao_audit_log WHERE at < now() - make_interval(secs => :audit_seconds) LIMIT :batch)""",
    "leases": f"""
        DELETE FROM ao_action_leases WHERE action_id IN (
            SELECT l.action_id FROM ao_action_leases l JOIN ao_actions a ON a.id = l.action_id
            WHERE l.released_at < now() - interval '1 day' AND a.state IN {_TERMINAL} LIMIT :batch)""",
    "actions": f"""
        DELETE FROM ao_actions WHERE id IN (
            SELECT id FROM ao_actions WHERE state IN {_TERMINAL}
            AND coalesce(finished_at, created_at) < now() - make_interval(secs => :action_seconds) LIMIT :batch)""",
    "buffer_files": """
        DELETE FROM ao_buffer_files WHERE id IN (
            SELECT f.id FROM ao_buffer_files f LEFT JOIN ao_buffer_batches b ON b.id = f.batch_id
            WHERE f.state IN ('committed', 'quarantined')
            AND f.arrived_at < now() - make_interval(secs => :buffer_seconds)
            AND (b.id IS NULL OR (b.state IN ('done', 'empty')
                                  AND b.finished_at < now() - make_interval(secs => :buffer_seconds)))
            LIMIT :batch)""",
    "buffer_batches": """
        DELETE FROM ao_buffer_batches WHERE id IN (
            SELECT b.id FROM ao_buffer_batches b WHERE b.state IN ('done', 'empty')
            AND b.finished_at < now() - make_interval(secs => :buffer_seconds)
            AND NOT EXISTS (SELECT 1 FROM ao_buffer_files f WHERE f.batch_id = b.id) LIMIT :batch)""",
    "history_expired": """
        DELETE FROM ao_entropy_history WHERE id IN (
            SELECT id FROM ao_entropy_history
            WHERE recorded_at < now() - make_interval(secs => :history_seconds) LIMIT :batch)""",
    "history_thinned": """
        DELETE FROM ao_entropy_history WHERE id IN (
            SELECT h.id FROM ao_entropy_history h
            WHERE h.recorded_at < now() - make_interval(secs => :history_full_seconds)
            AND EXISTS (SELECT 1 FROM ao_entropy_history g
                        WHERE g.table_id = h.table_id AND g.spec_id = h.spec_id
                        AND g.partition_key = h.partition_key
                        AND date_trunc('hour', g.recorded_at) = date_trunc('hour', h.recorded_at)
                        AND g.id > h.id)
            LIMIT :batch)""",
    "partition_stats_gone": """
        DELETE FROM ao_partition_stats WHERE (table_id, spec_id, partition_key) IN (
            SELECT p.table_id, p.spec_id, p.partition_key FROM ao_partition_stats p
            LEFT JOIN ao_table_cursors c ON c.table_id = p.table_id
            WHERE (p.n_files = 0 AND p.updated_at < now() - make_interval(secs => :gone_seconds))
               OR (c.last_error LIKE 'TableNotFound%'
                   AND c.last_error_at < now() - make_interval(secs => :gone_seconds)
                   AND (c.observed_at IS NULL OR c.observed_at < c.last_error_at))
            LIMIT :batch)""",
}


def apply_retention(settings: Settings, *, batch: int = BATCH) -> dict[str, int]:
    """Remove what the AO_RETENTION_* settings no longer keep; rows removed per kind (idempotent)."""
    params: dict[str, Any] = {
        "audit_seconds": settings.retention_audit_days * DAY, "action_seconds": settings.retention_action_days * DAY,
        "buffer_seconds": settings.retention_buffer_days * DAY, "history_seconds": settings.retention_history_days * DAY,
        "history_full_seconds": settings.retention_history_full_days * DAY,
        "gone_seconds": settings.retention_gone_partition_days * DAY, "batch": batch,
    }
    removed: dict[str, int] = {}
    for name, statement in _STATEMENTS.items():
        total = 0
        while True:
            with session_scope(settings) as session:
                if name == "audit":
                    session.execute(text("SET LOCAL ao.retention = 'on'"))
                count = session.execute(text(statement), params).rowcount or 0
            total += count
            if count < batch:
                break
        removed[name] = total
    if any(removed.values()):
        log.info("retention removed %s", ", ".join(f"{n}={c}" for n, c in removed.items() if c))
    return removed
