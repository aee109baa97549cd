"""Where the Observe step finds work: tables whose metadata moved, partitions that need attention, and
partitions an action is already pending on.

Every function takes a Session and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Numeric, and_, case, cast, func, select, text, tuple_
from sqlalchemy.orm import Session

from autooptimize.storage.models import Action, ActionState, PartitionStats, TrackedTable
from autooptimize.storage.observe_models import TableCursor
from autooptimize.storage.stats import MeanSquaredErrorMixin, PartitionId


@dataclass(frozen=True)
class AttentionRow(MeanSquaredErrorMixin):
    """A partition of an enabled tracked table that needs attention, with its table's identifier."""

    table_id: int
    identifier: str
    spec_id: int
    partition_key: str
    n_files: int
    sse: int
    tolerance: int


_CHANGED_SQL = text(
    """
    SELECT t.identifier
    FROM ao_tracked_tables t
    JOIN iceberg_tables i
      ON i.catalog_name = t.catalog AND i.table_namespace || '.' || i.table_name = t.identifier
    LEFT JOIN ao_table_cursors c ON c.table_id = t.id
    WHERE t.catalog = :catalog
      AND (c.table_id IS NULL OR c.needs_scan OR c.metadata_location IS DISTINCT FROM i.metadata_location)
    ORDER BY t.identifier
    """
)


def changed_tables_in_catalog_db(session: Session, catalog: str) -> list[str]:
    """Tracked tables whose catalog entry (pyiceberg's SqlCatalog ``iceberg_tables``, in the same database)
    names another metadata file than their cursor, never seen, or flagged for a scan. One query."""
    return [r.identifier for r in session.execute(_CHANGED_SQL, {"catalog": catalog})]


# The oldest transaction still running (32-bit xid): every catalog row written later has an xmin at or after it.
_HORIZON_SQL = text("SELECT txid_snapshot_xmin(txid_current_snapshot()) % 4294967296")

_MOVED_SQL = text(
    """
    WITH moved AS MATERIALIZED (
        SELECT i.table_namespace || '.' || i.table_name AS identifier, i.metadata_location
        FROM iceberg_tables i
        WHERE i.catalog_name = :catalog AND age(i.xmin) <= age(CAST(CAST(:since AS text) AS xid))
    )
    SELECT t.identifier
    FROM moved m
    JOIN ao_tracked_tables t ON t.catalog = :catalog AND t.identifier = m.identifier
    LEFT JOIN ao_table_cursors c ON c.table_id = t.id
    WHERE c.table_id IS NULL OR c.needs_scan OR c.metadata_location IS DISTINCT FROM m.metadata_location
    ORDER BY t.identifier
    """
)


def catalog_horizon(session: Session) -> int:
    """The oldest transaction id still running, for :func:`moved_tables_in_catalog_db` next time."""
    return int(session.execute(_HORIZON_SQL).scalar_one())


def moved_tables_in_catalog_db(session: Session, catalog: str, since: int) -> list[str]:
    """Like :func:`changed_tables_in_catalog_db`, among only the catalog rows written by transactions at or
    after ``since`` (a :func:`catalog_horizon` taken before the last look): a scan of the catalog's rows
    without reading or joining the unchanged ones."""
    return [r.identifier for r in session.execute(_MOVED_SQL, {"catalog": catalog, "since": since})]


_FINGERPRINT_SQL = text(
    """
    SELECT count(*) AS n, coalesce(sum(hashtext(table_namespace || '.' || table_name)::bigint), 0) AS h
    FROM iceberg_tables WHERE catalog_name = :catalog
    """
)


def catalog_fingerprint(session: Session, catalog: str) -> tuple[int, int]:
    """(tables, Σ hash of their names) of a SqlCatalog's table list in this database: it moves when a table
    is created or dropped (a drop and a create whose hashes cancel out are left to the next full listing)."""
    row = session.execute(_FINGERPRINT_SQL, {"catalog": catalog}).one()
    return int(row.n), int(row.h)


def changed_tables_from_locations(session: Session, catalog: str, locations: dict[str, str | None]) -> list[str]:
    """Like :func:`changed_tables_in_catalog_db`, for a catalog database elsewhere: ``locations`` maps
    ``namespace.table`` to its current metadata location."""
    rows = session.execute(
        select(TrackedTable.identifier, TableCursor.table_id, TableCursor.metadata_location, TableCursor.needs_scan)
        .outerjoin(TableCursor, TableCursor.table_id == TrackedTable.id)
        .where(TrackedTable.catalog == catalog)
        .order_by(TrackedTable.identifier)
    )
    return [
        r.identifier for r in rows
        if r.identifier in locations
        and (r.table_id is None or r.needs_scan or r.metadata_location != locations[r.identifier])
    ]


def needs_attention_sql(sse: ColumnElement[int], n_files: ColumnElement[int], small_files: ColumnElement[int],
                        small_bytes: ColumnElement[int], target: ColumnElement[int],
                        tolerance: ColumnElement[int]) -> ColumnElement[bool]:
    """The SQL form of the health rule, ``autooptimize.domain.entropy.partition_needs_attention``: the
    excess over the best layout the partition's capped bytes ``B = small_bytes + target·(N − small)`` allow,
    ``E = SSE − (target − B mod target)²`` (0 when B is a multiple), with N > 0, E > 0 and E ≥ T²·N;
    decided exactly in NUMERIC (no BIGINT overflow)."""
    num = Numeric(40, 0)
    s = cast(target, num)
    capped = cast(small_bytes, num) + s * (n_files - small_files)
    rest = func.mod(capped, s)
    excess = sse - case((rest > 0, (s - rest) * (s - rest)), else_=0)
    return and_(n_files > 0, excess > 0, excess >= cast(tolerance, num) * tolerance * n_files)


def attention_rows(session: Session, catalog: str, *, table_id: int | None = None,
                   partitions: set[PartitionId] | None = None) -> list[AttentionRow]:
    """Partitions of enabled tables that need attention by the health rule (:func:`needs_attention_sql`)."""
    p = PartitionStats.__table__.c
    t = TrackedTable.__table__.c
    stmt = (
        select(t.id, t.identifier, t.tolerance, p.spec_id, p.partition_key, p.n_files, p.sse)
        .join_from(PartitionStats, TrackedTable, p.table_id == t.id)
        .where(t.catalog == catalog, t.enabled.is_(True),
               needs_attention_sql(p.sse, p.n_files, p.small_files, p.small_bytes, t.target_file_size, t.tolerance))
        .order_by(t.identifier, p.spec_id, p.partition_key)
    )
    if table_id is not None:
        stmt = stmt.where(t.id == table_id)
    if partitions is not None:
        if not partitions:
            return []
        stmt = stmt.where(tuple_(p.spec_id, p.partition_key).in_(sorted(partitions)))
    return [
        AttentionRow(r.id, r.identifier, r.spec_id, r.partition_key, int(r.n_files), int(r.sse), int(r.tolerance))
        for r in session.execute(stmt)
    ]


def pending_partitions(session: Session, table_ids: Iterable[int]) -> dict[int, set[PartitionId | None]]:
    """Per table, the partitions with a queued or running action (``None``: one covers the whole table)."""
    ids = sorted(set(table_ids))
    if not ids:
        return {}
    result: dict[int, set[PartitionId | None]] = {i: set() for i in ids}
    rows = session.execute(
        select(Action.table_id, Action.spec_id, Action.partition_key).where(
            Action.table_id.in_(ids),
            Action.state.in_([ActionState.QUEUED.value, ActionState.RUNNING.value]),
        )
    )
    for r in rows:
        result[r.table_id].add(None if r.partition_key is None else (r.spec_id, r.partition_key))
    return result
