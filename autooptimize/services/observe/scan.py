"""Exact scans: recompute N and SSE from a snapshot's live files, for a whole table or one partition."""

from __future__ import annotations

import logging
import time

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.services.observe.attention import attend
from autooptimize.services.observe.common import (
    ObserveReport,
    OnAttention,
    TrackedSettings,
    tracked_settings,
    why_scan,
)
from autooptimize.storage.db import session_scope
from autooptimize.storage.stats import (
    ExactPartition,
    PartitionId,
    advance_cursor,
    append_history,
    exact_partition,
    get_cursor,
    lock_table,
    mark_needs_scan,
    partition_figures,
    replace_stats,
)
from autooptimize.storage.write_clock import resync_spans

log = logging.getLogger(__name__)


def scan_table(
    settings: Settings,
    identifier: str,
    partition_key: str | None = None,
    *,
    spec_id: int | None = None,
    reason: str = "requested",
    on_attention: OnAttention | None = None,
) -> ObserveReport:
    """Recompute N and SSE exactly, correcting any drift; recorded in the history with source ``scan``.

    Without ``partition_key`` the whole table is recomputed from its current snapshot and the cursor
    moves there. With one, that partition (in every spec, or only ``spec_id``) is recomputed at the
    cursor's snapshot, so the rolling figures of the other partitions stay consistent; when the cursor
    cannot be used (never seen, its snapshot expired) the whole table is scanned instead.
    """
    started = time.monotonic()
    info = tracked_settings(settings, identifier)
    table = load_table(settings, identifier)
    report = ObserveReport(identifier, info.table_id)
    if partition_key is None:
        touched = scan_whole_table(settings, info, table, report, reason)
    else:
        touched = _scan_partition(settings, info, table, report, partition_key, spec_id, reason)
    attend(settings, identifier, info, touched, report, on_attention)
    report.seconds = time.monotonic() - started
    return report


def scan_whole_table(settings: Settings, info: TrackedSettings, table: Table, report: ObserveReport,
                     reason: str) -> set[PartitionId]:
    """Replace the table's stats with exact figures at its current snapshot and move the cursor there;
    returns the partitions written or emptied."""
    snapshot = table.current_snapshot()
    exact = [
        exact_partition(pf.spec_id, pf.key, pf.values, [f.size for f in pf.data_files], info.target,
                        pf.newest_ms)
        for pf in (live_partitions(table, snapshot).values() if snapshot is not None else ())
    ]
    snapshot_id = snapshot.snapshot_id if snapshot is not None else None
    sequence_number = snapshot.sequence_number if snapshot is not None else None
    table_uuid = str(table.metadata.table_uuid)
    with session_scope(settings) as session:
        # Whatever another observer did meanwhile, the stats are now exact at this snapshot; if it had
        # gone further, its snapshots are refused as replays by the history next time and end in a scan.
        lock_table(session, info.table_id)
        figures = replace_stats(session, info.table_id, exact, snapshot_id)
        resync_spans(session, info.table_id)
        append_history(session, info.table_id, figures, snapshot_id, "scan")
        advance_cursor(
            session, info.table_id,
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            metadata_location=table.metadata_location,
            table_uuid=table_uuid,
            target_file_size=info.target,
            scanned=True,
        )
    log.info("table %s scanned (%s): %d partitions, %d files at snapshot %s", report.table, reason,
             len(exact), sum(p.n_files for p in exact), snapshot_id)
    report.scanned = True
    report.scan_reason = reason
    report.snapshot_id = snapshot_id
    touched = {(f.spec_id, f.partition_key) for f in figures}
    report.partitions_changed = len(touched)
    return touched


def _scan_partition(settings: Settings, info: TrackedSettings, table: Table, report: ObserveReport, key: str,
                    spec_id: int | None, reason: str) -> set[PartitionId]:
    with session_scope(settings) as session:
        cursor = get_cursor(session, info.table_id)
    if cursor is None or why_scan(cursor, table, info) is not None:
        return scan_whole_table(settings, info, table, report, why_scan(cursor, table, info) or reason)
    base_id = cursor.last_snapshot_id
    base = table.metadata.snapshot_by_id(base_id) if base_id is not None else None
    if base_id is not None and base is None:
        return scan_whole_table(settings, info, table, report, "cursor_snapshot_expired")
    parts = live_partitions(table, base) if base is not None else {}
    exact = [
        exact_partition(pf.spec_id, pf.key, pf.values, [f.size for f in pf.data_files], info.target,
                        pf.newest_ms)
        for (sid, k), pf in parts.items() if k == key and (spec_id is None or sid == spec_id)
    ]
    only = _replace_partition_at_cursor(settings, info, key, spec_id, exact, base_id)
    if only is None:  # the cursor moved while reading: a whole-table scan is consistent whatever happened
        return scan_whole_table(settings, info, table, report, reason)
    report.scanned = True
    report.scan_reason = reason
    report.snapshot_id = base_id
    report.partitions_changed = len(only)
    return only


def _replace_partition_at_cursor(settings: Settings, info: TrackedSettings, key: str, spec_id: int | None,
                                 exact: list[ExactPartition], base_id: int | None) -> set[PartitionId] | None:
    """Write a partition's exact figures if the cursor still stands at ``base_id``; None if it moved."""
    with session_scope(settings) as session:
        lock_table(session, info.table_id)
        current = get_cursor(session, info.table_id)
        if current is None or current.needs_scan or current.last_snapshot_id != base_id:
            return None
        stored = {pid for pid in partition_figures(session, info.table_id)
                  if pid[1] == key and (spec_id is None or pid[0] == spec_id)}
        only = stored | {(p.spec_id, p.partition_key) for p in exact}
        figures = replace_stats(session, info.table_id, exact, base_id, only=only)
        append_history(session, info.table_id, figures, base_id, "scan")
        advance_cursor(
            session, info.table_id,
            snapshot_id=current.last_snapshot_id,
            sequence_number=current.last_sequence_number,
            metadata_location=current.metadata_location,
            table_uuid=current.table_uuid,
            target_file_size=info.target,
            scanned=True,
        )
        return only


def mark_for_scan(settings: Settings, identifier: str, reason: str = "requested") -> None:
    """Ask the listener to scan the table on its next pass instead of rolling forward."""
    info = tracked_settings(settings, identifier)
    with session_scope(settings) as session:
        lock_table(session, info.table_id)
        mark_needs_scan(session, info.table_id, reason)

