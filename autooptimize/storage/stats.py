"""Repositories of the Observe step: partition stats, entropy history and the per-table cursor.

Every function takes a Session and never commits. The caller applies one snapshot (its stats deltas, its
history rows and the cursor advance) in one transaction, after :func:`lock_table`, so a crash never
half-applies a snapshot and two observers of one table take turns. Finding work (changed tables,
partitions needing attention) is in :mod:`autooptimize.storage.observe_work`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, literal_column, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autooptimize.domain.entropy import partition_needs_attention, squared_error
from autooptimize.domain.policy import COLD_GAPS_KEPT
from autooptimize.errors import AutoOptimizeError
from autooptimize.redact import redact
from autooptimize.storage.models import EntropyHistory, PartitionStats
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.repositories import now
from autooptimize.storage.shard_leases import check_cursor_write

PartitionId = tuple[int, str]  # (spec_id, partition_key)


class StatsDrift(AutoOptimizeError):
    """A rolling update does not fit the stored figure (a count would go negative, a snapshot would be
    counted twice, totals disagree): the stored stats cannot be trusted and the table needs a scan."""


class MeanSquaredErrorMixin:
    """The ``mse`` of a frozen dataclass holding a partition's ``sse`` and ``n_files``."""

    sse: int
    n_files: int

    @property
    def mse(self) -> float:
        """SSE / N in bytes²; 0.0 for an empty partition."""
        return self.sse / self.n_files if self.n_files else 0.0


@dataclass(frozen=True)
class PartitionFigures(MeanSquaredErrorMixin):
    """Stored File Size Entropy of one partition."""

    spec_id: int
    partition_key: str
    n_files: int
    sse: int
    total_bytes: int
    small_files: int
    small_bytes: int = 0

    def needs_attention(self, target: int, tolerance: int) -> bool:
        """The health rule (:func:`~autooptimize.domain.entropy.partition_needs_attention`)."""
        return partition_needs_attention(self.sse, self.n_files, self.small_files, self.small_bytes, target,
                                         tolerance)


@dataclass(frozen=True)
class ExactPartition:
    """A partition's figures from a full scan, with its human-readable values."""

    spec_id: int
    partition_key: str
    values: dict[str, Any]
    n_files: int
    sse: int
    total_bytes: int
    small_files: int
    small_bytes: int = 0
    last_write_ms: int | None = None  # the newest live file a writer added (scans see no more than that)


@dataclass(frozen=True)
class Cursor:
    table_id: int
    last_snapshot_id: int | None
    last_sequence_number: int | None
    metadata_location: str | None
    table_uuid: str | None
    target_file_size: int | None
    needs_scan: bool
    scan_reason: str | None


def exact_partition(spec_id: int, key: str, values: dict[str, Any], sizes: Sequence[int],
                    target: int, last_write_ms: int | None = None) -> ExactPartition:
    """Figures of a partition whose live data files have ``sizes`` bytes."""
    return ExactPartition(
        spec_id=spec_id,
        partition_key=key,
        values=values,
        n_files=len(sizes),
        sse=sum(squared_error(s, target) for s in sizes),
        total_bytes=sum(sizes),
        small_files=sum(1 for s in sizes if s < target),
        small_bytes=sum(s for s in sizes if s < target),
        last_write_ms=last_write_ms,
    )


# --- the cursor -------------------------------------------------------------------------------------------

def lock_table(session: Session, table_id: int) -> None:
    """Serialise observers of one table until the transaction ends."""
    session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": f"ao.observe:{table_id}"})


def get_cursor(session: Session, table_id: int) -> Cursor | None:
    row = session.get(TableCursor, table_id, populate_existing=True)
    if row is None:
        return None
    return Cursor(
        table_id=row.table_id,
        last_snapshot_id=row.last_snapshot_id,
        last_sequence_number=row.last_sequence_number,
        metadata_location=row.metadata_location,
        table_uuid=row.table_uuid,
        target_file_size=row.target_file_size,
        needs_scan=row.needs_scan,
        scan_reason=row.scan_reason,
    )


def _upsert_cursor(session: Session, table_id: int, values: dict[str, Any],
                   increments: dict[str, int] | None = None) -> None:
    # a sharded listener's write is fenced on its shard's lease (the stats go in the same transaction)
    check_cursor_write(session, table_id)
    increments = {k: v for k, v in (increments or {}).items() if v}
    # A cursor first created by something other than an observation (an error, a scan request) has
    # no stats behind it: it asks for a scan.
    first = {"needs_scan": True, "scan_reason": "first_sight"}
    insert_values = {"table_id": table_id, **first, **values, **increments, "updated_at": func.now()}
    stmt = insert(TableCursor).values(**insert_values)
    table = TableCursor.__table__
    update: dict[str, Any] = {**values, "updated_at": func.now()}
    for name, amount in increments.items():
        update[name] = table.c[name] + amount
    session.execute(stmt.on_conflict_do_update(index_elements=[TableCursor.table_id], set_=update))


def advance_cursor(
    session: Session,
    table_id: int,
    *,
    snapshot_id: int | None,
    sequence_number: int | None,
    metadata_location: str | None,
    table_uuid: str | None,
    target_file_size: int,
    snapshots_applied: int = 0,
    scanned: bool = False,
) -> None:
    """Record that the stats now hold every change up to ``snapshot_id``; clears a pending scan."""
    _upsert_cursor(
        session,
        table_id,
        {
            "last_snapshot_id": snapshot_id,
            "last_sequence_number": sequence_number,
            "metadata_location": metadata_location,
            "table_uuid": table_uuid,
            "target_file_size": target_file_size,
            "needs_scan": False,
            "scan_reason": None,
            "last_error": None,
            "observed_at": now(),
        },
        {"snapshots_applied": snapshots_applied, "scans": 1 if scanned else 0},
    )


def mark_needs_scan(session: Session, table_id: int, reason: str) -> None:
    """Flag the table so the next observation scans it instead of rolling forward."""
    _upsert_cursor(session, table_id, {"needs_scan": True, "scan_reason": reason[:200]})


def record_error(session: Session, table_id: int, error: str) -> None:
    _upsert_cursor(session, table_id, {"last_error": redact(error), "last_error_at": now()})


def count_attention(session: Session, table_id: int, *, enqueued: int, below_threshold: int,
                    pending: int) -> None:
    _upsert_cursor(session, table_id, {}, {
        "attention_enqueued": enqueued, "skipped_below_threshold": below_threshold, "skipped_pending": pending,
    })


# --- stats ------------------------------------------------------------------------------------------------

def apply_delta(
    session: Session,
    table_id: int,
    *,
    spec_id: int,
    partition_key: str,
    values: dict[str, Any],
    added: Sequence[int],
    removed: Sequence[int],
    target: int,
    snapshot_id: int,
    written_at: datetime | None = None,
    ordinal: int | None = None,
    late_lag: int | None = None,
) -> PartitionFigures:
    """Roll one partition forward over files ``added`` and ``removed`` (sizes); returns the new figures.

    A partition left with no file is deleted (a scan would not list it). ``written_at``: the snapshot's
    time when a writer added files (not for a REPLACE); the partition's ``last_write_at`` moves to it.
    ``ordinal``: the partition's time value (None: it has none); ``late_lag``: how many partitions behind
    the spec's newest this write landed (kept as the largest seen).
    Raises StatsDrift when the removals do not fit what is stored; the caller's transaction must then be
    rolled back.
    """
    sse_added = sum(squared_error(s, target) for s in added)
    sse_removed = sum(squared_error(s, target) for s in removed)
    small_added = sum(1 for s in added if s < target)
    small_removed = sum(1 for s in removed if s < target)
    small_bytes_added = sum(s for s in added if s < target)
    d_small_bytes = small_bytes_added - sum(s for s in removed if s < target)
    d_n = len(added) - len(removed)
    d_sse = sse_added - sse_removed
    d_bytes = sum(added) - sum(removed)
    d_small = small_added - small_removed
    c = PartitionStats.__table__.c
    # The inserted row holds only the additions: PostgreSQL checks constraints on the proposed row
    # even when it then updates, and a new partition with removals is drift anyway (caught below).
    stmt = insert(PartitionStats).values(
        table_id=table_id, spec_id=spec_id, partition_key=partition_key, partition_values=values,
        n_files=len(added), sse=sse_added, total_bytes=sum(added), small_files=small_added,
        small_bytes=small_bytes_added, snapshot_id=snapshot_id, updated_at=func.now(), last_write_at=written_at,
        ordinal=ordinal, late_lag=late_lag,
    ).on_conflict_do_update(
        index_elements=[c.table_id, c.spec_id, c.partition_key],
        set_={
            "n_files": c.n_files + d_n,
            "sse": c.sse + d_sse,
            "total_bytes": c.total_bytes + d_bytes,
            "small_files": c.small_files + d_small,
            "small_bytes": c.small_bytes + d_small_bytes,
            "last_write_at": c.last_write_at if written_at is None else func.greatest(c.last_write_at, written_at),
            "write_gaps": c.write_gaps if written_at is None else _gaps_after(written_at),
            "ordinal": c.ordinal if ordinal is None else ordinal,
            "late_lag": c.late_lag if late_lag is None else func.greatest(c.late_lag, late_lag),
            "snapshot_id": snapshot_id,
            "updated_at": func.now(),
        },
    ).returning(c.n_files, c.sse, c.total_bytes, c.small_files, c.small_bytes,
                literal_column("(xmax = 0)").label("inserted"))
    try:
        row = session.execute(stmt).one()
    except IntegrityError as exc:
        raise StatsDrift(
            f"removing {len(removed)} file(s) from partition {partition_key!r} (spec {spec_id}) of table "
            f"{table_id} would make its stats negative: {exc.orig}".strip()
        ) from None
    figures = PartitionFigures(spec_id, partition_key, int(row.n_files), int(row.sse), int(row.total_bytes),
                               int(row.small_files), int(row.small_bytes))
    if (row.inserted and removed) or (figures.n_files == 0 and (figures.sse or figures.total_bytes)):
        raise StatsDrift(
            f"snapshot {snapshot_id} removes files from partition {partition_key!r} (spec {spec_id}) of table "
            f"{table_id} that the stored stats do not hold"
        )
    if figures.n_files == 0:
        session.execute(delete(PartitionStats).where(
            c.table_id == table_id, c.spec_id == spec_id, c.partition_key == partition_key))
    return figures


def _gaps_after(written_at: datetime) -> Any:
    """The partition's ``write_gaps`` once a writer's commit at ``written_at`` is counted: its gap since the
    last write first, the :data:`COLD_GAPS_KEPT` newest kept; unchanged when it is not later (a snapshot seen
    twice or out of order adds no gap)."""
    return text(
        "CASE WHEN ao_partition_stats.last_write_at IS NOT NULL"
        " AND CAST(:gap_at AS timestamptz) > ao_partition_stats.last_write_at"
        " THEN (array_prepend(CAST(extract(epoch FROM CAST(:gap_at AS timestamptz) - ao_partition_stats.last_write_at)"
        " AS double precision), coalesce(ao_partition_stats.write_gaps, CAST('{}' AS double precision[]))))"
        f"[1:{COLD_GAPS_KEPT}] ELSE ao_partition_stats.write_gaps END").bindparams(gap_at=written_at)


def _later(stored: datetime | None, ms: int | None) -> datetime | None:
    seen = None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    return seen if stored is None else stored if seen is None else max(stored, seen)


def replace_stats(
    session: Session,
    table_id: int,
    partitions: Iterable[ExactPartition],
    snapshot_id: int | None,
    *,
    only: set[PartitionId] | None = None,
) -> list[PartitionFigures]:
    """Replace the table's stats (or only the partitions in ``only``) with exact figures.

    Returns the figures written, plus an empty figure for every partition that held stats and now has no
    file, so the caller can record both in the history.
    """
    c = PartitionStats.__table__.c
    where = [c.table_id == table_id]
    if only is not None:
        if not only:
            return []
        where.append(tuple_(c.spec_id, c.partition_key).in_(sorted(only)))
    # the listener's write clock, which a scan cannot see: kept across the replacement
    known = {(r.spec_id, r.partition_key): (r.last_write_at, r.write_gaps, r.ordinal, r.late_lag)
             for r in session.execute(select(c.spec_id, c.partition_key, c.last_write_at, c.write_gaps, c.ordinal,
                                             c.late_lag).where(*where))}
    before = set(known)
    session.execute(delete(PartitionStats).where(*where))
    rows = [p for p in partitions if p.n_files > 0 and (only is None or (p.spec_id, p.partition_key) in only)]
    values = []
    for p in rows:
        last_write_at, write_gaps, ordinal, late_lag = known.get((p.spec_id, p.partition_key), (None, None, None, None))
        values.append({
            "table_id": table_id, "spec_id": p.spec_id, "partition_key": p.partition_key,
            "partition_values": p.values, "n_files": p.n_files, "sse": p.sse, "total_bytes": p.total_bytes,
            "small_files": p.small_files, "small_bytes": p.small_bytes, "snapshot_id": snapshot_id,
            # a scan sees only the live files' times (a merged file has none): never move the clock back
            "last_write_at": _later(last_write_at, p.last_write_ms), "write_gaps": write_gaps,
            "ordinal": ordinal, "late_lag": late_lag})
    if values:
        session.execute(insert(PartitionStats), values)
    written = [PartitionFigures(p.spec_id, p.partition_key, p.n_files, p.sse, p.total_bytes, p.small_files,
                                p.small_bytes) for p in rows]
    gone = before - {(p.spec_id, p.partition_key) for p in rows}
    return written + [PartitionFigures(spec_id, key, 0, 0, 0, 0) for spec_id, key in sorted(gone)]


def append_history(session: Session, table_id: int, figures: Iterable[PartitionFigures],
                   snapshot_id: int | None, source: str) -> int:
    """Append one entropy-history row per partition; returns how many.

    Rows of source ``snapshot`` are unique per partition and snapshot: recording one twice raises
    StatsDrift (the transaction must be rolled back), so a snapshot is never counted twice.
    """
    rows = [
        {"table_id": table_id, "spec_id": f.spec_id, "partition_key": f.partition_key,
         "snapshot_id": snapshot_id, "source": source, "n_files": f.n_files, "sse": f.sse, "mse": f.mse}
        for f in figures
    ]
    if not rows:
        return 0
    try:
        session.execute(insert(EntropyHistory.__table__), rows)  # Core: the ORM bulk path cost more than the row
    except IntegrityError as exc:
        raise StatsDrift(f"snapshot {snapshot_id} of table {table_id} is already in the history: {exc.orig}") from None
    return len(rows)


def partition_figures(session: Session, table_id: int) -> dict[PartitionId, PartitionFigures]:
    """Every stored partition of the table."""
    c = PartitionStats.__table__.c
    return {
        (r.spec_id, r.partition_key): PartitionFigures(r.spec_id, r.partition_key, int(r.n_files), int(r.sse),
                                                       int(r.total_bytes), int(r.small_files), int(r.small_bytes))
        for r in session.execute(
            select(c.spec_id, c.partition_key, c.n_files, c.sse, c.total_bytes, c.small_files, c.small_bytes)
            .where(c.table_id == table_id)
        )
    }


def partition_labels(session: Session, table_id: int) -> dict[PartitionId, dict[str, Any]]:
    """The human-readable values stored per partition (what status prints, with format_human)."""
    c = PartitionStats.__table__.c
    return {(r.spec_id, r.partition_key): dict(r.partition_values or {})
            for r in session.execute(select(c.spec_id, c.partition_key, c.partition_values)
                                     .where(c.table_id == table_id))}


def table_file_count(session: Session, table_id: int) -> int:
    c = PartitionStats.__table__.c
    return int(session.execute(select(func.coalesce(func.sum(c.n_files), 0)).where(c.table_id == table_id)).scalar_one())



def median_partition_bytes(session: Session, table_id: int, exclude: PartitionId | None = None,
                           target: int | None = None) -> int | None:
    """The median bytes of the table's partitions that hold files less ``exclude`` (the one judged); with
    ``target``, of those holding a target's bytes or more when any do (``domain.policy.expected_partition_bytes``,
    in one read). None when there is none: what the merge policy sets a partition's scale by."""
    c = PartitionStats.__table__.c
    where = [c.table_id == table_id, c.n_files > 0]
    if exclude is not None:
        where.append(tuple_(c.spec_id, c.partition_key) != tuple_(*exclude))
    median = func.percentile_cont(0.5).within_group(c.total_bytes)
    full = median.filter(c.total_bytes >= (target if target is not None else 1 << 62))
    value = next((v for v in session.execute(select(full, median).where(*where)).one() if v is not None), None)
    return None if value is None else int(value)
