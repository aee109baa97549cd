"""Rewriting a snapshot's data manifests, clustered by partition (pyiceberg 0.12 has no rewrite_manifests).

The commit is one REPLACE snapshot that carries every live data file over unchanged — same path, same
snapshot id, same data and file sequence numbers — into new manifests sorted by partition, so a scan
that filters on the partition opens few manifests. Delete manifests are kept as they are. The new
manifests are written once and committed through the service's one commit loop: a concurrent append is
carried over (its manifests are kept beside ours), and nothing is committed unless the new manifests,
read back, hold exactly the entries of the old ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot

from autooptimize.errors import ActionRefused, ConflictAbort, VerificationFailed
from autooptimize.iceberg.commits import apply_with_retry
from autooptimize.iceberg.staging import ManifestFactory, remove_files

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


class StagedManifestRewrite:
    """A REPLACE that adds and removes no file: the head's data manifests written again, clustered by
    partition, once. On a new head it applies as long as the head still lists every manifest it replaces
    (a concurrent append only adds manifests, which are kept); when someone else rewrote one of them
    (a merge marking files deleted, another manifest rewrite), the rewrite is staged again against that
    head. Nothing is written unless the new manifests, read back, hold exactly the old entries."""

    operation = Operation.REPLACE

    def __init__(self, table: Table, target_size: int) -> None:
        self.snapshot_id = table.metadata.new_snapshot_id()
        self._table = table
        self._target_size = target_size
        self._factory = ManifestFactory(table, self.snapshot_id)
        self._replaced: set[str] = set()
        self._new: list[ManifestFile] = []
        self.rewrites_on_retry = 0
        self.report = ManifestRewrite()
        self._stage(table.metadata)

    def _stage(self, metadata: TableMetadata) -> None:
        head = metadata.snapshot_by_name(MAIN_BRANCH)
        if head is None:
            raise ConflictAbort("the table has no snapshot to rewrite the manifests of")
        manifests = head.manifests(self._table.io)
        old = [m for m in manifests if m.content == ManifestContent.DATA]
        by_spec: dict[int, list[ManifestEntry]] = defaultdict(list)
        for manifest in old:
            for entry in manifest.fetch_manifest_entry(self._table.io, discard_deleted=True):
                by_spec[manifest.partition_spec_id].append(entry)
        before = sorted(_fingerprint(e) for entries in by_spec.values() for e in entries)
        report = ManifestRewrite(before=ManifestSet.of(old), files=len(before), rows=sum(f[1] for f in before),
                                 delete_manifests_kept=len(manifests) - len(old))
        specs = metadata.specs()
        new: list[ManifestFile] = []
        for spec_id, entries in sorted(by_spec.items()):
            entries.sort(key=_sort_key)
            new.extend(self._write_clustered(specs[spec_id], entries, report))
        after = sorted(_fingerprint(e) for m in new
                       for e in m.fetch_manifest_entry(self._table.io, discard_deleted=True))
        if after != before:
            raise VerificationFailed(
                f"rewritten manifests hold {len(after)} entries ({sum(f[1] for f in after)} rows), "
                f"the originals {len(before)} ({report.rows} rows), or the entries differ"
            )
        if self._new:  # the earlier staging is superseded: its manifests would only be orphans
            stale = {m.manifest_path for m in self._new}
            remove_files(self._table, stale)
            self._factory.paths = [p for p in self._factory.paths if p not in stale]
            self.rewrites_on_retry += len(new)
        report.after = ManifestSet.of(new)
        self.report, self._new = report, new
        self._replaced = {m.manifest_path for m in old}

    def _write_clustered(self, spec: PartitionSpec, entries: list[ManifestEntry],
                         report: ManifestRewrite) -> list[ManifestFile]:
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
                writer = self._factory.writer(spec, ManifestContent.DATA)
                writer.__enter__()
            writer.add_entry(ManifestEntry.from_args(
                status=ManifestEntryStatus.EXISTING, snapshot_id=entry.snapshot_id,
                sequence_number=entry.sequence_number, file_sequence_number=entry.file_sequence_number,
                data_file=entry.data_file))
        if writer is not None:
            writer.__exit__(None, None, None)
            written.append(writer.to_manifest_file())
        report.written.extend(str(m.manifest_path) for m in written)
        return written

    def _listed(self, head: TableMetadata, table: Table) -> list[ManifestFile]:
        snapshot = head.snapshot_by_name(MAIN_BRANCH)
        return snapshot.manifests(table.io) if snapshot is not None else []

    def validate(self, head: TableMetadata, table: Table) -> None:
        listed = {m.manifest_path for m in self._listed(head, table)}
        if not self._replaced <= listed:
            self._stage(head)  # someone rewrote a manifest we replace: cluster that head instead

    def manifests(self, head: TableMetadata, table: Table) -> list[ManifestFile]:
        kept = [m for m in self._listed(head, table) if m.manifest_path not in self._replaced]
        return self._new + kept

    def summary(self) -> dict[str, str]:
        report = self.report
        return {"manifests-created": str(report.after.count), "manifests-replaced": str(report.before.count),
                "manifests-kept": str(report.delete_manifests_kept), "entries-processed": str(report.files)}

    def written(self) -> list[str]:
        return list(self._factory.paths)


def commit_manifest_rewrite(table: Table, properties: dict[str, str],
                            target_size: int) -> tuple[Snapshot, ManifestRewrite]:
    """Commit one REPLACE snapshot whose data manifests are the head's rewritten by partition, through the
    service's one commit loop (:func:`~autooptimize.iceberg.commits.apply_with_retry`).

    Raises Retry when concurrent commits keep winning past the table's ``commit.retry.*`` limits and
    VerificationFailed when the new manifests would not hold exactly the old entries; nothing is committed
    and the manifests written are removed. ``properties`` go into the snapshot summary (the action id).
    """
    if table.format_version >= 3:
        raise ActionRefused(
            "format_version",
            f"table format v{table.format_version} keeps row lineage in its manifests; rewriting them is only "
            "supported for v1 and v2 tables",
        )
    staged = StagedManifestRewrite(table, target_size)
    try:
        snapshot = apply_with_retry(table, staged, properties)
    except VerificationFailed:
        remove_files(table, staged.written())
        raise
    return snapshot, staged.report
