"""What the observe modules share: the report of one observation, the hand-over callback and a tracked
table's settings and cursor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg.table import Table

from autooptimize.config import Settings
from autooptimize.errors import InvalidArgument
from autooptimize.storage.db import session_scope
from autooptimize.storage.repositories import tracked_table
from autooptimize.storage.stats import Cursor, get_cursor

OnAttention = Callable[[int, int, str], None]
"""Called with (table_id, spec_id, partition_key) for a partition whose MSE ≥ T² and nothing is pending."""


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
class TrackedSettings:
    """A tracked table's id and the sizing its stats are computed for."""

    table_id: int
    target: int
    tolerance: int
    enabled: bool = True


def tracked_settings(settings: Settings, identifier: str) -> TrackedSettings:
    """The table's settings; InvalidArgument when it is not tracked."""
    return tracked_with_cursor(settings, identifier)[0]


def tracked_with_cursor(settings: Settings, identifier: str) -> tuple[TrackedSettings, Cursor | None]:
    """The table's settings and its cursor (None before the first observation); InvalidArgument when untracked."""
    with session_scope(settings) as session:
        row = tracked_table(session, settings.catalog, identifier)
        if row is None:
            raise InvalidArgument(
                f"table {identifier!r} is not tracked in catalog {settings.catalog!r}; "
                "track it first (autooptimize track <table>)"
            )
        return TrackedSettings(row.id, row.target_file_size, row.tolerance, row.enabled), get_cursor(session, row.id)


def why_scan(cursor: Cursor | None, table: Table, info: TrackedSettings) -> str | None:
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
