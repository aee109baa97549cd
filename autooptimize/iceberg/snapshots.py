"""Snapshot diffs: what one snapshot added to and removed from each partition, read from the manifests that
snapshot wrote and nothing else.

A snapshot writes new manifests (``added_snapshot_id`` is its id) for everything it changes: ADDED entries
for new files, DELETED entries for removed ones, and EXISTING entries for files it carried over while
rewriting or merging a manifest. Only ADDED and DELETED entries stamped with the snapshot's own id are
changes; EXISTING entries and manifests inherited from the parent are not read at all.

When the chain from the last snapshot seen to the current one cannot be followed (an expired snapshot
in between, a rollback, a replaced table) or a snapshot's summary disagrees with its manifests,
:class:`HistoryGap` is raised and the caller scans instead of keeping a figure it cannot trust.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from autooptimize.errors import AutoOptimizeError
from autooptimize.iceberg.files import partition_key, partition_values
from autooptimize.iceberg.v3 import manifests_of, read_entries

__all__ = ["HistoryGap", "PartitionDelta", "SnapshotDiff", "snapshot_diff", "snapshots_since"]


class HistoryGap(AutoOptimizeError):
    """The snapshots since the last one seen cannot be followed; the table needs a scan."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class PartitionDelta:
    """Data files one snapshot added to and removed from one partition (sizes in bytes)."""

    spec_id: int
    key: str
    values: dict[str, Any]
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SnapshotDiff:
    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    operation: str | None
    partitions: dict[tuple[int, str], PartitionDelta]
    manifests_read: int
    total_data_files: int | None  # from the summary, when the writer recorded it
    # partitions this snapshot added delete files to (decide weighs their delete load)
    delete_partitions: frozenset[tuple[int, str]] = frozenset()

    @property
    def added_files(self) -> int:
        return sum(len(d.added) for d in self.partitions.values())

    @property
    def removed_files(self) -> int:
        return sum(len(d.removed) for d in self.partitions.values())


def snapshots_since(metadata: TableMetadata, last_seen: int | None) -> list[Snapshot]:
    """Snapshots of the main branch after ``last_seen`` up to the current one, oldest first.

    ``last_seen=None`` means the table had no snapshot when last seen: the whole history is returned.
    ``last_seen`` itself may have expired since, as long as its child still names it as parent. Raises
    HistoryGap when a snapshot on the way is missing (expired before being seen; pyiceberg also clears the
    parent id of a snapshot whose parent expires, which cuts the chain) or when ``last_seen`` is not an
    ancestor of the current snapshot (rollback, replaced table).
    """
    current_id = metadata.current_snapshot_id
    if current_id is None or current_id == last_seen:
        if current_id is None and last_seen is not None:
            raise HistoryGap("no_current_snapshot", f"the table has no current snapshot; {last_seen} was last seen")
        return []
    chain: list[Snapshot] = []
    snapshot_id: int | None = current_id
    seen: set[int] = set()
    while snapshot_id != last_seen:
        if snapshot_id is None:
            raise HistoryGap(
                "not_an_ancestor",
                f"snapshot {last_seen} is not an ancestor of current snapshot {current_id} "
                "(a snapshot between them expired, a rollback, or a replaced table)",
            )
        snapshot = metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise HistoryGap(
                "expired_before_seen",
                f"snapshot {snapshot_id} between {last_seen} and {current_id} expired before it was seen",
            )
        if snapshot_id in seen:  # a corrupt parent chain must not loop forever
            raise HistoryGap("cyclic_history", f"snapshot {snapshot_id} is its own ancestor")
        seen.add(snapshot_id)
        chain.append(snapshot)
        snapshot_id = snapshot.parent_snapshot_id
    chain.reverse()
    return chain


def _summary_int(snapshot: Snapshot, key: str) -> int | None:
    if snapshot.summary is None:
        return None
    value = snapshot.summary.get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def snapshot_diff(table: Table, snapshot: Snapshot) -> SnapshotDiff:
    """Per-partition data files added and removed by ``snapshot``, from its own manifests only.

    Delete files (positional or equality) do not count: File Size Entropy measures data files. Raises
    HistoryGap when the snapshot's summary counts other numbers of added or removed data files than its
    manifests hold (e.g. a writer that re-used another snapshot's manifests).
    """
    schema = table.schema()
    specs = table.specs()
    sid = snapshot.snapshot_id
    partitions: dict[tuple[int, str], PartitionDelta] = {}
    delete_partitions: set[tuple[int, str]] = set()
    manifests_read = 0
    for manifest in manifests_of(table.io, snapshot):  # reader trees built once per schema
        if manifest.added_snapshot_id != sid:
            continue
        if manifest.content == ManifestContent.DELETES:
            if manifest.added_files_count:
                manifests_read += 1
                for entry in read_entries(manifest, table.io, discard_deleted=True):
                    if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == sid:
                        df = entry.data_file
                        delete_partitions.add((df.spec_id, partition_key(specs[df.spec_id], schema, df.partition)))
            continue
        if manifest.content != ManifestContent.DATA:
            continue
        if manifest.added_files_count == 0 and manifest.deleted_files_count == 0:
            continue  # a manifest of carried-over files only (rewritten or merged)
        manifests_read += 1
        for entry in read_entries(manifest, table.io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.EXISTING or entry.snapshot_id != sid:
                continue
            df = entry.data_file
            if df.content != DataFileContent.DATA:
                continue
            spec = specs[df.spec_id]
            key = partition_key(spec, schema, df.partition)
            delta = partitions.get((df.spec_id, key))
            if delta is None:
                delta = PartitionDelta(df.spec_id, key, partition_values(spec, schema, df.partition))
                partitions[(df.spec_id, key)] = delta
            size = int(df.file_size_in_bytes)
            (delta.added if entry.status == ManifestEntryStatus.ADDED else delta.removed).append(size)
    diff = SnapshotDiff(
        snapshot_id=sid,
        parent_snapshot_id=snapshot.parent_snapshot_id,
        sequence_number=snapshot.sequence_number or 0,
        operation=snapshot.summary.operation.value if snapshot.summary is not None else None,
        partitions=partitions,
        manifests_read=manifests_read,
        total_data_files=_summary_int(snapshot, "total-data-files"),
        delete_partitions=frozenset(delete_partitions),
    )
    # Writers that keep totals (pyiceberg, Java) leave zero counts out of the summary.
    default = 0 if diff.total_data_files is not None else None
    for key, found in (("added-data-files", diff.added_files), ("deleted-data-files", diff.removed_files)):
        expected = _summary_int(snapshot, key)
        expected = default if expected is None else expected
        if expected is not None and expected != found:
            raise HistoryGap(
                "summary_mismatch",
                f"snapshot {sid} summary says {key}={expected} but its manifests hold {found}",
            )
    return diff
