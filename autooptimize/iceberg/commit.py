"""The rewrite commit: one snapshot that removes the inputs and adds the outputs.

pyiceberg 0.12 has no public "replace". ``overwrite()`` validates serializably, so it fails whenever
anyone appends anywhere in the table and compaction would starve under streaming ingest. The
producer here validates only what Iceberg's RewriteFiles validates: every removed file is still live,
and no delete file other than those the rewrite already applied applies to the removed files.
Concurrent appends are not conflicts. Removed files may be data or delete files (delete compaction
drops the delete files it folded into the output in the same snapshot); a rewritten manifest keeps
its content type, so delete files stay in delete manifests.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from autooptimize.errors import ConflictAbort, VerificationFailed

ACTION_ID_PROPERTY = "autooptimize.action-id"
ACTION_KIND_PROPERTY = "autooptimize.action-kind"
#: Set on each snapshot of an action committed in parts (partial progress): the part's number, from 1.
ACTION_PART_PROPERTY = "autooptimize.action-part"
#: Set on the last part only: how many parts the action committed. An action is committed when it has a
#: snapshot without a part number, or one carrying this.
ACTION_PARTS_PROPERTY = "autooptimize.action-parts"


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg 0.12 only writes data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def new_manifest_writer(producer: Any, spec: PartitionSpec, content: ManifestContent) -> ManifestWriter:
    """A manifest writer of ``producer``'s snapshot for ``content`` (data or deletes)."""
    metadata = producer._transaction.table_metadata
    if content == ManifestContent.DATA:
        return producer.new_manifest_writer(spec)  # type: ignore[no-any-return]
    if metadata.format_version < 2:
        raise VerificationFailed("delete manifests need a format-version 2 table")
    return DeleteManifestWriter(spec, producer.schema(), producer.new_manifest_output(), producer.snapshot_id,
                                producer._compression)


class _ReplaceDataFiles(_OverwriteFiles):
    """An OVERWRITE producer that commits as REPLACE and validates like Iceberg's RewriteFiles.

    ``allowed_deletes`` are the paths of delete files the rewrite has already applied to its output:
    they may stay live in the rewritten partitions. Any other delete file there is a conflict.
    """

    def __init__(self, transaction: Any, io: Any, snapshot_properties: dict[str, str] = EMPTY_DICT,
                 allowed_deletes: frozenset[str] = frozenset()) -> None:
        super().__init__(operation=Operation.OVERWRITE, transaction=transaction, io=io,
                         snapshot_properties=snapshot_properties)
        self._allowed_deletes = allowed_deletes

    def _validate_concurrency(self) -> None:
        # pyiceberg's window check would reject concurrent appends; _commit validates against the head.
        return None

    def _validate_no_new_deletes(self) -> None:
        head = self._transaction.table_metadata.snapshot_by_name(self._target_branch or "main")
        removed_data = [f for f in self._deleted_data_files if f.content == DataFileContent.DATA]
        if head is None or not removed_data:
            return
        partitions = {(f.spec_id, f.partition) for f in removed_data}
        for manifest in head.manifests(self._io):
            if manifest.content != ManifestContent.DELETES:
                continue
            for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                df = entry.data_file
                if df.content == DataFileContent.DATA or str(df.file_path) in self._allowed_deletes:
                    continue
                if (df.spec_id, df.partition) in partitions or len(self.spec(df.spec_id).fields) == 0:
                    raise ValidationException(
                        f"a delete file now applies to the rewritten partition: {df.file_path}"
                    )

    def _existing_manifests(self) -> list[ManifestFile]:
        """The head's manifests, those holding removed files rewritten with the same content type.

        A rewritten manifest carries the other entries as EXISTING and the removed ones as DELETED
        (stamped with this snapshot), as Iceberg's own rewrites do. Raises ValidationException when a
        removed file is not live at the head; this runs again against the new head on every retry.
        """
        head = self._transaction.table_metadata.snapshot_by_name(self._target_branch or "main")
        removed = {str(f.file_path) for f in self._deleted_data_files}
        found: set[str] = set()
        manifests: list[ManifestFile] = []
        evaluators: dict[int, Any] = {}
        for manifest in head.manifests(self._io) if head is not None else []:
            spec = self.spec(manifest.partition_spec_id)
            # _manifests() set a partition filter per spec of the removed files; a manifest whose
            # partition summaries exclude them is kept unread (a miss still fails the check below)
            if spec.fields and spec.spec_id not in evaluators:
                evaluators[spec.spec_id] = self._build_manifest_evaluator(spec.spec_id)
            if spec.fields and not evaluators[spec.spec_id](manifest):
                manifests.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            hits = [e for e in entries if str(e.data_file.file_path) in removed]
            if not hits:
                manifests.append(manifest)
                continue
            found.update(str(e.data_file.file_path) for e in hits)
            with new_manifest_writer(self, self.spec(manifest.partition_spec_id), manifest.content) as writer:
                for entry in entries:
                    gone = str(entry.data_file.file_path) in removed
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.DELETED if gone else ManifestEntryStatus.EXISTING,
                        snapshot_id=self._snapshot_id if gone else entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    ))
            manifests.append(writer.to_manifest_file())
        missing = sorted(removed - found)
        if missing:
            raise ValidationException(f"Missing required files to delete: {', '.join(missing)}")
        return manifests

    def _deleted_entries(self) -> list[ManifestEntry]:
        # The DELETED entries live in the rewritten manifests (_existing_manifests).
        return []

    def _commit(self):  # type: ignore[no-untyped-def]
        # Runs on the first attempt and again, against the refreshed head, on every retry.
        self._validate_no_new_deletes()
        return super()._commit()

    def _manifests(self):  # type: ignore[no-untyped-def]
        # pyiceberg writes every added file into one manifest of the *current* spec; a file merged
        # within an older spec needs a manifest of its own spec, or its partition is written wrongly.
        current = self._transaction.table_metadata.default_spec_id
        added = self._added_data_files
        older: dict[int, list[DataFile]] = {}
        for data_file in added:
            if data_file.spec_id != current:
                older.setdefault(data_file.spec_id, []).append(data_file)
        if not older:
            return super()._manifests()
        self._added_data_files = [f for f in added if f.spec_id == current]
        try:
            manifests = super()._manifests()
        finally:
            self._added_data_files = added
        extra = []
        for spec_id, files in sorted(older.items()):
            with self.new_manifest_writer(spec=self.spec(spec_id)) as writer:
                for data_file in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None,
                                                       data_file=data_file))
            extra.append(writer.to_manifest_file())
        return extra + manifests

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        # pyiceberg's summary arithmetic only knows append/overwrite/delete; the totals are the same.
        return Summary(operation=Operation.REPLACE, **summary.additional_properties)


def commit_replace(
    table: Table,
    removed: list[DataFile],
    added: list[DataFile],
    properties: dict[str, str],
    allowed_deletes: frozenset[str] = frozenset(),
    allow_no_output: bool = False,
) -> Snapshot:
    """Commit one REPLACE snapshot on main; retries on concurrent commits (pyiceberg's policy).

    ``removed`` may hold delete files as well as data files. Raises ConflictAbort when a removed file
    is no longer live or a delete file not in ``allowed_deletes`` now applies to a removed data file;
    then nothing was committed. The snapshot's summary carries ``properties`` (the action id). Pass a
    freshly loaded table: a stale one costs a failed attempt before pyiceberg refreshes and retries.
    ``allow_no_output`` lets a delete compaction whose inputs were wholly deleted add nothing.
    """
    if (not added and not allow_no_output) or not any(f.content == DataFileContent.DATA for f in removed):
        raise VerificationFailed("a rewrite must remove and add at least one data file")
    tx = table.transaction()
    producer = _ReplaceDataFiles(tx, table.io, snapshot_properties=properties, allowed_deletes=allowed_deletes)
    for data_file in removed:
        producer.delete_data_file(data_file)
    for data_file in added:
        producer.append_data_file(data_file)
    try:
        producer.commit()
        tx.commit_transaction()
    except ValidationException as exc:
        raise ConflictAbort(str(exc)) from None
    except CommitFailedException as exc:
        raise ConflictAbort(f"commit kept failing on concurrent updates: {exc}") from None
    snapshot = table.metadata.snapshot_by_id(producer.snapshot_id)
    assert snapshot is not None
    return snapshot


def find_action_snapshot(table: Table, action_id: str) -> Snapshot | None:
    """The snapshot that completed ``action_id``, if the table's metadata still has it.

    That is its one snapshot, or for an action committed in parts the last part (the one that carries
    ``ACTION_PARTS_PROPERTY``); an action with only some parts committed is not committed.
    """
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None or summary.get(ACTION_ID_PROPERTY) != action_id:
            continue
        if summary.get(ACTION_PART_PROPERTY) is None or summary.get(ACTION_PARTS_PROPERTY) is not None:
            return snapshot
    return None


def action_parts(table: Table, action_id: str) -> dict[int, Snapshot]:
    """The committed parts of ``action_id`` (partial progress) by part number."""
    parts: dict[int, Snapshot] = {}
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is not None and summary.get(ACTION_ID_PROPERTY) == action_id:
            part = summary.get(ACTION_PART_PROPERTY)
            if part is not None:
                parts[int(part)] = snapshot
    return parts


def action_added_paths(table: Table, action_id: str) -> set[str]:
    """Paths of the data files every snapshot of ``action_id`` added (live or not: history references them)."""
    ids = {s.snapshot_id for s in table.metadata.snapshots
           if s.summary is not None and s.summary.get(ACTION_ID_PROPERTY) == action_id}
    paths: set[str] = set()
    for snapshot_id in ids:
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot_id or manifest.content != ManifestContent.DATA:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id:
                    paths.add(str(entry.data_file.file_path))
    return paths


def data_file_from_footer(table: Table, path: str, spec_id: int, partition: Any,
                          sort_order_id: int | None = None) -> DataFile:
    """Build a DataFile from a Parquet footer, with the partition and spec of its inputs.

    Spark writes every column as optional; statistics come from the footer by field id, so the
    table's required columns stay required in the table schema.
    """
    schema = table.schema()
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.read_metadata(stream)
    arrow_schema = metadata.schema.to_arrow_schema()
    missing_ids = [f.name for f in arrow_schema if not f.metadata or b"PARQUET:field_id" not in f.metadata]
    if missing_ids:
        raise VerificationFailed(f"output {path} has columns without Parquet field ids: {missing_ids}")
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=len(input_file),
        sort_order_id=sort_order_id,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    data_file.spec_id = spec_id  # from_args does not set it (it is not a manifest field)
    return data_file


def live_data_paths(table: Table) -> set[str]:
    """Paths of every live data file in the current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return set()
    paths: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            paths.add(str(entry.data_file.file_path))
    return paths
