"""Observe: keep every tracked partition's N and SSE current from snapshots alone, without scanning.

For each new snapshot, oldest first along the chain since the cursor, only the manifests that snapshot
wrote are read; its per-partition deltas, its history rows and the cursor advance commit in one
transaction. When the chain cannot be followed (first sight, a snapshot expired before it was seen, a
rollback, a re-tuned target, totals that disagree) the table is scanned instead: an exact recomputation
from the current snapshot, recorded as a scan. Partitions whose MSE reaches T² are handed to
``on_attention`` unless an action is already pending for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg.table import Table
from sqlalchemy.engine import make_url

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.catalog import get_catalog, load_table
from autooptimize.iceberg.files import live_partitions
from autooptimize.iceberg.snapshots import HistoryGap, snapshot_diff, snapshots_since
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table, tracked_tables
from autooptimize.storage.stats import (
    AttentionRow,
    Cursor,
    ExactPartition,
    PartitionId,
    StatsDrift,
    advance_cursor,
    append_history,
    apply_delta,
    attention_rows,
    changed_tables_from_locations,
    changed_tables_in_catalog_db,
    count_attention,
    exact_partition,
    get_cursor,
    lock_table,
    mark_needs_scan,
    partition_figures,
    pending_partitions,
    record_error,
    replace_stats,
    table_file_count,
)

log = logging.getLogger(__name__)

MAX_CHAIN = 1000  # more snapshots than this waiting: one scan reads less than following them

OnAttention = Callable[[int, int, str], None]
"""Called with (table_id, spec_id, partition_key) for a partition whose MSE ≥ T² and nothing is pending."""

__all__ = [
    "Attention",
    "ObserveReport",
    "OnAttention",
    "PollSchedule",
    "changed_tables",
    "mark_for_scan",
    "observe_table",
    "observed_state",
    "partitions_needing_attention",
    "record_observe_error",
    "scan_table",
    "sweep_attention",
]


@dataclass
class ObserveReport:
    """What one observation (or scan) of a table did."""

    table: str
    table_id: int
    snapshot_id: int | None = None  # the snapshot the stats now stand at
    snapshots_applied: int = 0
    manifests_read: int = 0
    files_added: int = 0
    files_removed: int = 0
    scanned: bool = False
    scan_reason: str | None = None
    superseded: bool = False  # another observer moved the cursor first; the next pass resumes
    partitions_changed: int = 0
    needing_attention: int = 0
    enqueued: int = 0
    skipped_below_threshold: int = 0
    skipped_pending: int = 0
    enqueue_failed: int = 0
    seconds: float = 0.0
    # partitions that received delete files: handed to decide whatever their MSE (delete load)
    delete_partitions: list[tuple[int, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.snapshots_applied or self.scanned)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Attention:
    """A partition whose MSE ≥ tolerance²; ``pending`` when an action is already queued or running on it."""

    table: str
    table_id: int
    spec_id: int
    partition_key: str
    n_files: int
    sse: int
    mse: float
    tolerance: int
    pending: bool


@dataclass(frozen=True)
class _Tracked:
    table_id: int
    target: int
    tolerance: int


class _Superseded(Exception):
    """Another observer advanced the cursor (or asked for a scan) after this one read it."""


def _tracked(settings: Settings, identifier: str) -> _Tracked:
    return _tracked_with_cursor(settings, identifier)[0]


def _tracked_with_cursor(settings: Settings, identifier: str) -> tuple[_Tracked, Cursor | None]:
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is None:
            raise InvalidArgument(
                f"table {identifier!r} is not tracked in catalog {settings.catalog!r}; "
                "track it first (autooptimize track <table>)"
            )
        return _Tracked(row.id, row.target_file_size, row.tolerance), get_cursor(session, row.id)


def _scan_reason(cursor: Cursor | None, table: Table, info: _Tracked) -> str | None:
    """Why the stored stats cannot be rolled forward, or None when they can."""
    if cursor is None:
        return "first_sight"
    if cursor.needs_scan:
        return cursor.scan_reason or "requested"
    if cursor.target_file_size != info.target:
        return "target_changed"
    if cursor.table_uuid is not None and cursor.table_uuid != str(table.metadata.table_uuid):
        return "table_replaced"
    return None


# --- observe ----------------------------------------------------------------------------------------------

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
    info, cursor = _tracked_with_cursor(settings, identifier)
    table = load_table(settings, identifier)
    report = ObserveReport(identifier, info.table_id)
    touched = _roll_forward(settings, info, cursor, table, report, max_chain)
    _attend(settings, identifier, info, touched, report, on_attention)
    report.seconds = time.monotonic() - started
    return report


def _roll_forward(settings: Settings, info: _Tracked, cursor: Cursor | None, table: Table,
                  report: ObserveReport, max_chain: int) -> set[PartitionId]:
    # The cursor was read before the table was loaded: a snapshot committed in between is simply left
    # for the next pass, and each step re-checks the cursor under the table's lock.
    reason = _scan_reason(cursor, table, info)
    if reason is not None or cursor is None:
        return _scan(settings, info, table, report, reason or "first_sight")
    try:
        chain = snapshots_since(table.metadata, cursor.last_snapshot_id)
    except HistoryGap as gap:
        log.info("table %s: %s; scanning", report.table, gap)
        return _scan(settings, info, table, report, gap.reason)
    if len(chain) > max_chain:
        return _scan(settings, info, table, report, "long_backlog")
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
            return touched | _scan(settings, info, table, report, gap.reason)
        # Only the last step records the loaded metadata location: after a crash mid-chain the catalog
        # still differs from the cursor, so the table is picked up again.
        last = position == len(chain) - 1
        try:
            with session_scope(settings) as session:
                lock_table(session, info.table_id)
                current = get_cursor(session, info.table_id)
                if current is None or current.needs_scan or current.last_snapshot_id != expected:
                    raise _Superseded()
                figures = [
                    apply_delta(session, info.table_id, spec_id=d.spec_id, partition_key=d.key, values=d.values,
                                added=d.added, removed=d.removed, target=info.target,
                                snapshot_id=snapshot.snapshot_id)
                    for d in diff.partitions.values()
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
            return touched | _scan(settings, info, table, report, "drift")
        expected = snapshot.snapshot_id
        touched |= set(diff.partitions)
        report.delete_partitions.extend(p for p in sorted(diff.delete_partitions) if p not in report.delete_partitions)
        report.snapshot_id = snapshot.snapshot_id
        report.snapshots_applied += 1
        report.manifests_read += diff.manifests_read
        report.files_added += diff.added_files
        report.files_removed += diff.removed_files
    report.partitions_changed = len(touched)
    return touched


def _move_location(settings: Settings, info: _Tracked, table: Table, cursor: Cursor) -> None:
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


# --- scan -------------------------------------------------------------------------------------------------

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
    info = _tracked(settings, identifier)
    table = load_table(settings, identifier)
    report = ObserveReport(identifier, info.table_id)
    if partition_key is None:
        touched = _scan(settings, info, table, report, reason)
    else:
        touched = _scan_partition(settings, info, table, report, partition_key, spec_id, reason)
    _attend(settings, identifier, info, touched, report, on_attention)
    report.seconds = time.monotonic() - started
    return report


def _scan(settings: Settings, info: _Tracked, table: Table, report: ObserveReport, reason: str) -> set[PartitionId]:
    snapshot = table.current_snapshot()
    exact = [
        exact_partition(pf.spec_id, pf.key, pf.values, [f.size for f in pf.data_files], info.target)
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


def _scan_partition(settings: Settings, info: _Tracked, table: Table, report: ObserveReport, key: str,
                    spec_id: int | None, reason: str) -> set[PartitionId]:
    with session_scope(settings) as session:
        cursor = get_cursor(session, info.table_id)
    if cursor is None or _scan_reason(cursor, table, info) is not None:
        return _scan(settings, info, table, report, _scan_reason(cursor, table, info) or reason)
    base_id = cursor.last_snapshot_id
    base = table.metadata.snapshot_by_id(base_id) if base_id is not None else None
    if base_id is not None and base is None:
        return _scan(settings, info, table, report, "cursor_snapshot_expired")
    parts = live_partitions(table, base) if base is not None else {}
    exact = [
        exact_partition(pf.spec_id, pf.key, pf.values, [f.size for f in pf.data_files], info.target)
        for (sid, k), pf in parts.items() if k == key and (spec_id is None or sid == spec_id)
    ]
    only = _replace_partition_at_cursor(settings, info, key, spec_id, exact, base_id)
    if only is None:  # the cursor moved while reading: a whole-table scan is consistent whatever happened
        return _scan(settings, info, table, report, reason)
    report.scanned = True
    report.scan_reason = reason
    report.snapshot_id = base_id
    report.partitions_changed = len(only)
    return only


def _replace_partition_at_cursor(settings: Settings, info: _Tracked, key: str, spec_id: int | None,
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
    info = _tracked(settings, identifier)
    with session_scope(settings) as session:
        lock_table(session, info.table_id)
        mark_needs_scan(session, info.table_id, reason)


def record_observe_error(settings: Settings, identifier: str, error: str) -> None:
    """Keep the last observation error on the table's cursor, for status."""
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is not None:
            record_error(session, row.id, error[:2000])


# --- attention --------------------------------------------------------------------------------------------

def _attend(settings: Settings, identifier: str, info: _Tracked, touched: set[PartitionId],
            report: ObserveReport, on_attention: OnAttention | None) -> None:
    """Hand changed partitions with MSE ≥ T², and partitions that received delete files, to
    ``on_attention``; count those skipped."""
    deletes = {tuple(p) for p in report.delete_partitions}
    if not touched and not deletes:
        return
    with session_scope(settings) as session:
        rows = attention_rows(session, settings.catalog, table_id=info.table_id, partitions=touched)
        seen = {(r.spec_id, r.partition_key) for r in rows}
        rows += [AttentionRow(info.table_id, identifier, spec_id, key, 0, 0, info.tolerance)
                 for spec_id, key in sorted(deletes) if (spec_id, key) not in seen]
        pending = pending_partitions(session, [info.table_id]).get(info.table_id, set())
        report.needing_attention = len(rows)
        report.skipped_below_threshold = len(touched - {(r.spec_id, r.partition_key) for r in rows})
        report.skipped_pending = sum(1 for r in rows if None in pending or (r.spec_id, r.partition_key) in pending)
        # Counted as handed over before the hand-over: a crash in between loses it, and the sweep finds it.
        count_attention(session, info.table_id, enqueued=len(rows) - report.skipped_pending if on_attention else 0,
                        below_threshold=report.skipped_below_threshold, pending=report.skipped_pending)
    if on_attention is None:
        return
    for row in rows:
        if None in pending or (row.spec_id, row.partition_key) in pending:
            continue
        try:
            on_attention(info.table_id, row.spec_id, row.partition_key)
            report.enqueued += 1
        except Exception:  # one failed hand-off must not hide the others; the sweep retries it
            log.exception("table %s: enqueueing decide for %s failed", identifier, row.partition_key)
            report.enqueue_failed += 1


def partitions_needing_attention(settings: Settings, identifier: str | None = None) -> list[Attention]:
    """Partitions of enabled tracked tables (or of one table) whose stored MSE ≥ tolerance², worst first.

    Reads PostgreSQL only; ``pending`` marks those with a queued or running action. A periodic sweep
    enqueues the ones not pending, which also recovers hand-offs lost to a crash after a commit.
    """
    with session_scope(settings) as session:
        table_id = None
        if identifier is not None:
            row = tracked_table(session, settings.catalog, identifier)
            if row is None:
                raise InvalidArgument(f"table {identifier!r} is not tracked in catalog {settings.catalog!r}")
            table_id = row.id
        rows = attention_rows(session, settings.catalog, table_id=table_id)
        pending = pending_partitions(session, {r.table_id for r in rows})
    result = [
        Attention(
            table=r.identifier, table_id=r.table_id, spec_id=r.spec_id, partition_key=r.partition_key,
            n_files=r.n_files, sse=r.sse, mse=r.mse, tolerance=r.tolerance,
            pending=None in pending.get(r.table_id, set())
            or (r.spec_id, r.partition_key) in pending.get(r.table_id, set()),
        )
        for r in rows
    ]
    result.sort(key=lambda a: (-a.mse, a.table, a.spec_id, a.partition_key))
    return result


def sweep_attention(settings: Settings, on_attention: OnAttention, identifier: str | None = None) -> dict[str, int]:
    """Hand every partition with MSE ≥ T² and nothing pending to ``on_attention`` (the periodic sweep).

    Returns counts: ``enqueued``, ``pending`` (skipped: an action is queued or running) and ``failed``.
    """
    counts = {"enqueued": 0, "pending": 0, "failed": 0}
    for item in partitions_needing_attention(settings, identifier):
        if item.pending:
            counts["pending"] += 1
            continue
        try:
            on_attention(item.table_id, item.spec_id, item.partition_key)
            counts["enqueued"] += 1
        except Exception:  # the next sweep tries again
            log.exception("table %s: enqueueing decide for %s failed", item.table, item.partition_key)
            counts["failed"] += 1
    return counts


def observed_state(settings: Settings, identifier: str) -> dict[str, Any]:
    """What PostgreSQL holds for a table, without touching the catalog: the cursor and per-partition stats
    (worst MSE first). ``observed`` is False until the listener has seen the table once."""
    from autooptimize.storage.observe_models import TableCursor

    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is None:
            raise InvalidArgument(f"table {identifier!r} is not tracked in catalog {settings.catalog!r}")
        cursor = session.get(TableCursor, row.id)
        figures = partition_figures(session, row.id)
        tolerance, target = row.tolerance, row.target_file_size
        state: dict[str, Any] = {
            "table": identifier,
            "observed": cursor is not None and cursor.target_file_size is not None,
            "snapshot_id": cursor.last_snapshot_id if cursor else None,
            "observed_at": cursor.observed_at.isoformat() if cursor and cursor.observed_at else None,
            "needs_scan": bool(cursor and cursor.needs_scan),
            "scan_reason": cursor.scan_reason if cursor else None,
            "snapshots_applied": cursor.snapshots_applied if cursor else 0,
            "scans": cursor.scans if cursor else 0,
            "attention_enqueued": cursor.attention_enqueued if cursor else 0,
            "skipped_below_threshold": cursor.skipped_below_threshold if cursor else 0,
            "skipped_pending": cursor.skipped_pending if cursor else 0,
            "last_error": cursor.last_error if cursor else None,
        }
    ordered = sorted(figures.values(), key=lambda f: (-f.mse, f.partition_key))
    partitions: list[dict[str, Any]] = [
        {
            "partition": f.partition_key,
            "spec_id": f.spec_id,
            "n": f.n_files,
            "sse": f.sse,
            "mse": f.mse,
            "rmse_bytes": int(f.mse ** 0.5),
            "needs_attention": f.n_files > 0 and f.sse >= tolerance * tolerance * f.n_files,
            "bytes": f.total_bytes,
            "small_files": f.small_files,
        }
        for f in ordered
    ]
    state.update(target_file_size=target, tolerance=tolerance, files=sum(f.n_files for f in ordered),
                 partitions=partitions)
    return state


# --- finding changed tables -------------------------------------------------------------------------------

@dataclass
class PollSchedule:
    """Bounded-rate polling for catalogs without a table list to query: each table at most once every
    ``min_interval`` seconds, and at most ``max_per_call`` tables per call (least recently polled first)."""

    min_interval: float = 30.0
    max_per_call: int = 50
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.min_interval < 0:
            raise InvalidArgument(f"min_interval must be ≥ 0 seconds, got {self.min_interval!r}")
        if self.max_per_call < 1:
            raise InvalidArgument(f"max_per_call must be ≥ 1, got {self.max_per_call!r}")

    def due(self, identifiers: Iterable[str]) -> list[str]:
        with self._lock:
            now = self.clock()
            names = sorted(set(identifiers), key=lambda n: (self._last.get(n, float("-inf")), n))
            chosen = [n for n in names if now - self._last.get(n, float("-inf")) >= self.min_interval]
            chosen = chosen[: self.max_per_call]
            for name in chosen:
                self._last[name] = now
            return chosen


_default_polls: dict[str, PollSchedule] = {}


def _same_database(a: Any, b: str) -> bool:
    ua, ub = make_url(a), make_url(b)
    return (ua.host or "localhost", ua.port or 5432, ua.database, ua.username) == (
        ub.host or "localhost", ub.port or 5432, ub.database, ub.username)


def changed_tables(settings: Settings, *, poll: PollSchedule | None = None, force_polling: bool = False) -> list[str]:
    """Tracked tables that may have new snapshots (or were never observed, or wait for a scan).

    With pyiceberg's SqlCatalog in our database: one query joining its ``iceberg_tables`` with the
    cursors. With a SqlCatalog elsewhere: one query there, one here. Other catalogs have no cheap table
    list, so every tracked table is polled at a bounded rate (``poll``); ``observe_table`` then finds out
    whether anything changed.
    """
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    catalog = get_catalog(settings)
    if isinstance(catalog, SqlCatalog) and not force_polling:
        if _same_database(catalog.engine.url, settings.database_url):
            with session_scope(settings) as session:
                return changed_tables_in_catalog_db(session, settings.catalog)
        with Session(catalog.engine) as catalog_session:
            locations = {
                f"{r.table_namespace}.{r.table_name}": r.metadata_location
                for r in catalog_session.execute(
                    select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location)
                    .where(IcebergTables.catalog_name == settings.catalog)
                )
            }
        with session_scope(settings) as session:
            return changed_tables_from_locations(session, settings.catalog, locations)
    with session_scope(settings) as session:
        names = [r.identifier for r in tracked_tables(session, settings.catalog)]
    schedule = poll if poll is not None else _default_polls.setdefault(settings.catalog, PollSchedule())
    return schedule.due(names)


def stale_tables(settings: Settings) -> list[str]:
    """Tracked, enabled tables the listener has never observed or not within AO_RESCAN_AFTER_SECONDS."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import or_, select

    from autooptimize.storage.models import TrackedTable
    from autooptimize.storage.observe_models import TableCursor

    cutoff = datetime.now(UTC) - timedelta(seconds=settings.rescan_after_seconds)
    with session_scope(settings) as session:
        rows = session.execute(
            select(TrackedTable.identifier)
            .outerjoin(TableCursor, TableCursor.table_id == TrackedTable.id)
            .where(TrackedTable.catalog == settings.catalog, TrackedTable.enabled.is_(True))
            .where(or_(TableCursor.observed_at.is_(None), TableCursor.observed_at < cutoff))
            .order_by(TrackedTable.identifier)
        ).scalars()
        return list(rows)
