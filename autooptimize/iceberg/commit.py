"""The rewrite commit (one snapshot that removes the inputs and adds the outputs), the action
markers in snapshot summaries, and DataFiles built from Parquet footers.

pyiceberg 0.12 has no public "replace". ``overwrite()`` validates serializably, so it fails whenever
anyone appends anywhere in the table and compaction would starve under streaming ingest. The commit
here validates only what Iceberg's RewriteFiles validates (autooptimize.iceberg.commits): every
removed file is still live, and no delete file other than those the rewrite already applied applies
to the removed files. Concurrent appends are not conflicts. Removed files may be data or delete files
(delete compaction drops the delete files it folded into the output in the same snapshot).
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
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
    ManifestEntryStatus,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from autooptimize.domain.profile import phase
from autooptimize.errors import VerificationFailed
from autooptimize.iceberg.commits import CommitStats, apply_with_retry
from autooptimize.iceberg.staging import StagedRemoval, StagedReplace
from autooptimize.iceberg.v3 import ROW_ID_FIELD_ID, with_lineage

ACTION_ID_PROPERTY = "autooptimize.action-id"
ACTION_KIND_PROPERTY = "autooptimize.action-kind"
#: Set on each snapshot of an action committed in parts (partial progress): the part's number, from 1.
ACTION_PART_PROPERTY = "autooptimize.action-part"
#: Set on the last part only: how many parts the action committed. An action is committed when it has a
#: snapshot without a part number, or one carrying this.
ACTION_PARTS_PROPERTY = "autooptimize.action-parts"


def commit_replace(
    table: Table,
    removed: list[DataFile],
    added: list[DataFile],
    properties: dict[str, str],
    allowed_deletes: frozenset[str] = frozenset(),
    allow_no_output: bool = False,
    stats: CommitStats | None = None,
    ahead: StagedRemoval | None = None,
) -> Snapshot:
    """Commit one REPLACE snapshot on main; concurrent commits are retried by re-applying the same
    manifests on the new head (autooptimize.iceberg.commits).

    ``removed`` may hold delete files as well as data files. Raises ConflictAbort when a removed file
    is no longer live or a delete file not in ``allowed_deletes`` now applies to a removed data file;
    then nothing was committed. The snapshot's summary carries ``properties`` (the action id). Pass a
    freshly loaded table: a stale one costs a failed attempt. Raises Retry when concurrent writers kept
    winning past the table's commit.retry.* limits.
    ``allow_no_output`` lets a delete compaction whose inputs were wholly deleted add nothing.
    ``ahead``: the inputs' DELETED manifests written ahead (while the action's Spark job ran); taken when it
    removes exactly ``removed``, else left to its writer to remove.
    """
    if (not added and not allow_no_output) or not any(f.content == DataFileContent.DATA for f in removed):
        raise VerificationFailed("a rewrite must remove and add at least one data file")

    with phase("commit.stage"):
        staged = StagedReplace(table, removed, added, allowed_deletes=allowed_deletes, ahead=ahead)
    with phase("commit.apply"):
        return apply_with_retry(table, staged, properties, stats=stats)


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
    if str(ROW_ID_FIELD_ID).encode() in {f.metadata[b"PARQUET:field_id"] for f in arrow_schema}:
        schema = with_lineage(schema)  # a v3 rewrite's output carries its rows' lineage
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
