"""Rolling N and SSE forward from snapshot diffs, one snapshot per transaction."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.errors import AutoOptimizeError
from autooptimize.iceberg.catalog import load_table
from autooptimize.iceberg.partitions import time_ordinal
from autooptimize.iceberg.snapshots import HistoryGap, SnapshotDiff, snapshot_diff, snapshots_since
from autooptimize.services.observe.attention import attend
from autooptimize.services.observe.common import (
    ObserveReport,
    OnAttention,
    TrackedSettings,
    tracked_with_cursor,
    why_scan,
)
from autooptimize.services.observe.scan import scan_whole_table
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from autooptimize.storage.stats import (
    Cursor,
    PartitionFigures,
    PartitionId,
    StatsDrift,
    advance_cursor,
    append_history,
    apply_delta,
    get_cursor,
    lock_table,
    record_error,
    table_file_count,
)
from autooptimize.storage.write_clock import newest_ordinal, record_spans

log = logging.getLogger(__name__)

MAX_CHAIN = 1000  # more snapshots than this waiting: one scan reads less than following them


class _Superseded(AutoOptimizeError):
    """Another observer advanced the cursor (or asked for a scan) after this one read it."""


def observe_table(settings: Settings, identifier: str, *, on_attention: OnAttention | None = None,
                  max_chain: int = MAX_CHAIN) -> ObserveReport:
    """Bring the table's stats up to its current snapshot; returns what was done.

    Each new snapshot is applied, oldest first, in its own transaction together with the cursor advance,
    so a crash resumes exactly after the last snapshot applied and a snapshot is never counted twice.
    Falls back to :func:`scan_table` when the history cannot be followed, or when more than ``max_chain``
    snapshots wait (one scan is then cheaper). Raises InvalidArgument for an untracked table and
    TableNotFound for one missing from the catalog.
    """
    started = time.monotonic()
    info, cursor = tracked_with_cursor(settings, identifier)
    table = load_table(settings, identifier)
    report = ObserveReport(identifier, info.table_id)
    latest: dict[PartitionId, PartitionFigures] = {}
    touched = _roll_forward(settings, info, cursor, table, report, max_chain, latest)
    # after a roll the partitions' figures are at hand; after a scan attend reads them back
    attend(settings, identifier, info, touched, report, on_attention,
           figures=latest if not report.scanned and set(latest) == touched else None)
    report.seconds = time.monotonic() - started
    return report


def _roll_forward(settings: Settings, info: TrackedSettings, cursor: Cursor | None, table: Table,
                  report: ObserveReport, max_chain: int, latest: dict[PartitionId, PartitionFigures]) -> set[PartitionId]:
    """The partitions changed; ``latest`` receives each rolled partition's figures after its last snapshot."""
    # The cursor was read before the table was loaded: a snapshot committed in between is simply left
    # for the next pass, and each step re-checks the cursor under the table's lock.
    reason = why_scan(cursor, table, info)
    if reason is not None or cursor is None:
        return scan_whole_table(settings, info, table, report, reason or "first_sight")
    try:
        chain = snapshots_since(table.metadata, cursor.last_snapshot_id)
    except HistoryGap as gap:
        log.info("table %s: %s; scanning", report.table, gap)
        return scan_whole_table(settings, info, table, report, gap.reason)
    if len(chain) > max_chain:
        return scan_whole_table(settings, info, table, report, "long_backlog")
    report.snapshot_id = cursor.last_snapshot_id
    if not chain:
        if cursor.metadata_location != table.metadata_location:
            _move_location(settings, info, table, cursor)
        return set()
    touched: set[PartitionId] = set()
    expected = cursor.last_snapshot_id
    for position, snapshot in enumerate(chain):
        try:
            diff = snapshot_diff(table, snapshot)
        except HistoryGap as gap:
            log.warning("table %s: %s; scanning", report.table, gap)
            return touched | scan_whole_table(settings, info, table, report, gap.reason)
        # Only the last step records the loaded metadata location: after a crash mid-chain the catalog
        # still differs from the cursor, so the table is picked up again.
        last = position == len(chain) - 1
        try:
            with session_scope(settings) as session:
                lock_table(session, info.table_id)
                current = get_cursor(session, info.table_id)
                if current is None or current.needs_scan or current.last_snapshot_id != expected:
                    raise _Superseded()
                # a writer's snapshot moves the partitions' write clock; a REPLACE (a merge) does not
                written = (datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC)
                           if diff.operation != "replace" else None)
                ordinals, lags = _late_lags(session, info.table_id, table, diff, written is not None)
                record_spans(session, info.table_id, ordinals, lags)
                figures = [
                    apply_delta(session, info.table_id, spec_id=d.spec_id, partition_key=d.key, values=d.values,
                                added=d.added, removed=d.removed, target=info.target,
                                snapshot_id=snapshot.snapshot_id, written_at=written if d.added else None,
                                ordinal=ordinals.get(pid), late_lag=lags.get(pid))
                    for pid, d in diff.partitions.items()
                ]
                append_history(session, info.table_id, figures, snapshot.snapshot_id, "snapshot")
                if diff.total_data_files is not None:
                    total = table_file_count(session, info.table_id)
                    if total != diff.total_data_files:
                        raise StatsDrift(
                            f"after snapshot {snapshot.snapshot_id} the stats count {total} data files, "
                            f"the snapshot's summary {diff.total_data_files}"
                        )
                advance_cursor(
                    session, info.table_id,
                    snapshot_id=snapshot.snapshot_id,
                    sequence_number=snapshot.sequence_number,
                    metadata_location=table.metadata_location if last else current.metadata_location,
                    table_uuid=str(table.metadata.table_uuid),
                    target_file_size=info.target,
                    snapshots_applied=1,
                )
        except _Superseded:
            report.superseded = True
            break
        except StatsDrift as exc:
            log.warning("table %s: %s; scanning", report.table, exc)
            return touched | scan_whole_table(settings, info, table, report, "drift")
        expected = snapshot.snapshot_id
        touched |= set(diff.partitions)
        latest.update(((f.spec_id, f.partition_key), f) for f in figures)
        report.delete_partitions.extend(p for p in sorted(diff.delete_partitions) if p not in report.delete_partitions)
        report.snapshot_id = snapshot.snapshot_id
        report.snapshots_applied += 1
        report.manifests_read += diff.manifests_read
        report.files_added += diff.added_files
        report.files_removed += diff.removed_files
    report.partitions_changed = len(touched)
    return touched


def _late_lags(session: Any, table_id: int, table: Table, diff: SnapshotDiff,
               written: bool) -> tuple[dict[PartitionId, int], dict[PartitionId, int]]:
    """Each changed partition's time ordinal, and for a writer's snapshot how many partitions behind its
    spec's newest (this snapshot's included) each write landed: the table's late horizon (migration 0015)."""
    specs = table.specs()
    ordinals = {pid: o for pid, d in diff.partitions.items()
                if (o := time_ordinal(specs.get(d.spec_id), d.key)) is not None}
    if not written:
        return ordinals, {}
    added = {pid: o for pid, o in ordinals.items() if diff.partitions[pid].added}
    newest: dict[int, int] = {}
    for (spec_id, _), o in added.items():
        newest[spec_id] = max(newest.get(spec_id, o), o)
    for spec_id, top in newest.items():
        stored = newest_ordinal(session, table_id, spec_id)
        newest[spec_id] = top if stored is None else max(stored, top)
    return ordinals, {pid: newest[pid[0]] - o for pid, o in added.items()}


def _move_location(settings: Settings, info: TrackedSettings, table: Table, cursor: Cursor) -> None:
    """No new snapshot (an expiration, a property change): only the metadata location moves."""
    with session_scope(settings) as session:
        lock_table(session, info.table_id)
        current = get_cursor(session, info.table_id)
        if current is None or current.needs_scan or current.last_snapshot_id != cursor.last_snapshot_id:
            return
        advance_cursor(
            session, info.table_id,
            snapshot_id=current.last_snapshot_id,
            sequence_number=current.last_sequence_number,
            metadata_location=table.metadata_location,
            table_uuid=str(table.metadata.table_uuid),
            target_file_size=info.target,
        )


def record_observe_error(settings: Settings, identifier: str, error: str) -> None:
    """Keep the last observation error on the table's cursor, for status."""
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is not None:
            record_error(session, row.id, error[:2000])
