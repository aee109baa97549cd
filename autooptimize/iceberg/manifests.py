"""Rewriting a snapshot's data manifests, clustered by partition (pyiceberg 0.12 has no rewrite_manifests).

The commit is one REPLACE snapshot that carries every live data file over unchanged — same path, same
snapshot id, same data and file sequence numbers — into new manifests sorted by partition, so a scan
that filters on the partition opens few manifests. Delete manifests are kept as they are. Each commit
attempt (pyiceberg retries on concurrent commits) rewrites the head it commits on, so a concurrent
append is carried over rather than lost, and nothing is committed unless the new manifests, read back,
hold exactly the entries of the old ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.producer import commit_producer

DEFAULT_MANIFEST_TARGET_SIZE = 8 * 1024 * 1024  # Iceberg's commit.manifest.target-size-bytes default


def data_manifests(table: Table, snapshot: Snapshot | None = None) -> list[ManifestFile]:
    """The data manifests of ``snapshot`` (default: the current one)."""
    snapshot = snapshot or table.current_snapshot()
    if snapshot is None:
        return []
    return [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]


def manifest_target_size(table: Table) -> int:
    try:
        return int(table.properties.get("commit.manifest.target-size-bytes", DEFAULT_MANIFEST_TARGET_SIZE))
    except ValueError:
        return DEFAULT_MANIFEST_TARGET_SIZE


@dataclass(frozen=True)
class ManifestSet:
    """How many manifests, and their bytes."""

    count: int = 0
    total_bytes: int = 0

    @classmethod
    def of(cls, manifests: list[ManifestFile]) -> ManifestSet:
        return cls(len(manifests), sum(int(m.manifest_length) for m in manifests))


@dataclass
class ManifestRewrite:
    """What one attempt rewrote (the last attempt is the one committed)."""

    before: ManifestSet = ManifestSet()  # the data manifests replaced
    after: ManifestSet = ManifestSet()  # the data manifests written
    files: int = 0
    rows: int = 0
    delete_manifests_kept: int = 0
    partitions: int = 0
    written: list[str] = field(default_factory=list)


def _sort_key(entry: ManifestEntry) -> tuple[Any, ...]:
    # None sorts first within a field; one field always holds one type, so the rest compare.
    partition = entry.data_file.partition
    values = tuple(partition[i] for i in range(len(partition))) if partition is not None else ()
    return tuple((0, 0) if v is None else (1, v) for v in values) + (str(entry.data_file.file_path),)


def _fingerprint(entry: ManifestEntry) -> tuple[Any, ...]:
    df = entry.data_file
    # v1 manifests store no sequence numbers (read back as 0 or None): both mean 0 there
    return (str(df.file_path), int(df.record_count), int(df.file_size_in_bytes), entry.snapshot_id,
            entry.sequence_number or 0, entry.file_sequence_number or 0, df.spec_id)


class _RewriteManifests(_SnapshotProducer["_RewriteManifests"]):
    """A snapshot producer that adds and removes no file and rewrites the data manifests of its parent."""

    def __init__(self, transaction: Any, io: Any, target_size: int,
                 snapshot_properties: dict[str, str] = EMPTY_DICT) -> None:
        # OVERWRITE so pyiceberg's summary arithmetic carries the totals; _summary relabels it REPLACE.
        super().__init__(operation=Operation.OVERWRITE, transaction=transaction, io=io,
                         snapshot_properties=snapshot_properties)
        self._target_size = target_size
        self.report = ManifestRewrite()

    def _validate_concurrency(self) -> None:
        return None  # every attempt rewrites the head it commits on; no file is added or removed

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        head = self._transaction.table_metadata.snapshot_by_name(self._target_branch)
        if head is None:
            raise ConflictAbort("the table has no snapshot to rewrite the manifests of")
        manifests = head.manifests(self._io)
        old = [m for m in manifests if m.content == ManifestContent.DATA]
        kept = [m for m in manifests if m.content != ManifestContent.DATA]
        by_spec: dict[int, list[ManifestEntry]] = defaultdict(list)
        for manifest in old:
            for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                by_spec[manifest.partition_spec_id].append(entry)
        before = sorted(_fingerprint(e) for entries in by_spec.values() for e in entries)
        report = ManifestRewrite(
            before=ManifestSet.of(old), files=len(before), rows=sum(f[1] for f in before), delete_manifests_kept=len(kept),
        )
        new: list[ManifestFile] = []
        for spec_id, entries in sorted(by_spec.items()):
            entries.sort(key=_sort_key)
            new.extend(self._write_clustered(spec_id, entries, report))
        after = sorted(_fingerprint(e) for m in new for e in m.fetch_manifest_entry(self._io, discard_deleted=True))
        if after != before:
            raise VerificationFailed(
                f"rewritten manifests hold {len(after)} entries ({sum(f[1] for f in after)} rows), "
                f"the originals {len(before)} ({report.rows} rows), or the entries differ"
            )
        report.after = ManifestSet.of(new)
        self.report = report
        return new + kept

    def _write_clustered(self, spec_id: int, entries: list[ManifestEntry], report: ManifestRewrite) -> list[ManifestFile]:
        """Entries sorted by partition into manifests of about the target size; a partition is never split
        across manifests, so each manifest's partition bounds are tight."""
        written: list[ManifestFile] = []
        writer = None
        last_partition: Any = object()
        for entry in entries:
            partition = _sort_key(entry)[:-1]
            if partition != last_partition:
                report.partitions += 1
                if writer is not None and writer.tell() >= self._target_size:
                    writer.__exit__(None, None, None)
                    written.append(writer.to_manifest_file())
                    writer = None
                last_partition = partition
            if writer is None:
                writer = self.new_manifest_writer(self.spec(spec_id))
                writer.__enter__()
            writer.existing(entry)
        if writer is not None:
            writer.__exit__(None, None, None)
            written.append(writer.to_manifest_file())
        report.written.extend(str(m.manifest_path) for m in written)
        return written

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        report = self.report
        return Summary(
            operation=Operation.REPLACE,
            **summary.additional_properties,
            **{
                "manifests-created": str(report.after.count),
                "manifests-replaced": str(report.before.count),
                "manifests-kept": str(report.delete_manifests_kept),
                "entries-processed": str(report.files),
            },
        )


def commit_manifest_rewrite(table: Table, properties: dict[str, str], target_size: int) -> tuple[Snapshot, ManifestRewrite]:
    """Commit one REPLACE snapshot whose data manifests are the current ones rewritten by partition.

    Raises ConflictAbort when concurrent commits keep winning (nothing was committed) and
    VerificationFailed when the new manifests would not hold exactly the old entries (nothing committed,
    the new manifests removed). ``properties`` go into the snapshot summary (the action id).
    """
    if table.format_version >= 3:
        raise ActionRefused(
            "format_version",
            f"table format v{table.format_version} keeps row lineage in its manifests; rewriting them is only "
            "supported for v1 and v2 tables",
        )
    tx = table.transaction()
    producer = _RewriteManifests(tx, table.io, target_size, snapshot_properties=properties)
    snapshot = commit_producer(table, tx, producer, on_abort=producer._clean_all_uncommitted)
    return snapshot, producer.report
