"""The rewrite commit: one snapshot that removes the inputs and adds the outputs.

pyiceberg 0.12 has no public "replace". ``overwrite()`` validates serializably, so it fails whenever
anyone appends anywhere in the table and compaction would starve under streaming ingest. The
producer here validates only what Iceberg's RewriteFiles validates: every removed file is still live,
and no delete file applies to the removed files. Concurrent appends are not conflicts.
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
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from autooptimize.errors import ConflictAbort, VerificationFailed

ACTION_ID_PROPERTY = "autooptimize.action-id"
ACTION_KIND_PROPERTY = "autooptimize.action-kind"


class _ReplaceDataFiles(_OverwriteFiles):
    """An OVERWRITE producer that commits as REPLACE and validates like Iceberg's RewriteFiles."""

    def __init__(self, transaction: Any, io: Any, snapshot_properties: dict[str, str] = EMPTY_DICT) -> None:
        super().__init__(operation=Operation.OVERWRITE, transaction=transaction, io=io,
                         snapshot_properties=snapshot_properties)

    def _validate_concurrency(self) -> None:
        # pyiceberg's window check would reject concurrent appends; _commit validates against the head.
        return None

    def _validate_no_new_deletes(self) -> None:
        head = self._transaction.table_metadata.snapshot_by_name(self._target_branch or "main")
        if head is None or not self._deleted_data_files:
            return
        partitions = {(f.spec_id, f.partition) for f in self._deleted_data_files}
        for manifest in head.manifests(self._io):
            if manifest.content != ManifestContent.DELETES:
                continue
            for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                df = entry.data_file
                if df.content == DataFileContent.DATA:
                    continue
                if (df.spec_id, df.partition) in partitions or len(self.spec(df.spec_id).fields) == 0:
                    raise ValidationException(
                        f"a delete file now applies to the rewritten partition: {df.file_path}"
                    )

    def _commit(self):  # type: ignore[no-untyped-def]
        # Runs on the first attempt and again, against the refreshed head, on every retry.
        self._validate_no_new_deletes()
        return super()._commit()

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        # pyiceberg's summary arithmetic only knows append/overwrite/delete; the totals are the same.
        return Summary(operation=Operation.REPLACE, **summary.additional_properties)


def commit_replace(
    table: Table,
    removed: list[DataFile],
    added: list[DataFile],
    properties: dict[str, str],
) -> Snapshot:
    """Commit one REPLACE snapshot on main; retries on concurrent commits (pyiceberg's policy).

    Raises ConflictAbort when an input is no longer live or a delete file now applies to it; then
    nothing was committed. The snapshot's summary carries ``properties`` (the action id). Pass a
    freshly loaded table: a stale one costs a failed attempt before pyiceberg refreshes and retries.
    """
    if not removed or not added:
        raise VerificationFailed("a rewrite must remove and add at least one file")
    tx = table.transaction()
    producer = _ReplaceDataFiles(tx, table.io, snapshot_properties=properties)
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
    """The snapshot that committed ``action_id``, if the table's metadata still has it."""
    for snapshot in table.metadata.snapshots:
        if snapshot.summary is not None and snapshot.summary.get(ACTION_ID_PROPERTY) == action_id:
            return snapshot
    return None


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
    return DataFile.from_args(
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
