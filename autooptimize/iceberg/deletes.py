"""Iceberg v2 row-level delete files: write them and commit them (pyiceberg 0.12 writes none).

Row-level deletes come from other engines (Spark with the Iceberg runtime, Flink upserts, Trino). These
functions produce the same files so delete compaction can be exercised and measured on real tables:
Parquet files with the spec's field ids, committed by a producer that writes a delete manifest. The
committed snapshot is a DELETE (only delete files added), as Iceberg's RowDelta records it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType, NestedField, StringType

from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.commits import StagedAppend, apply_with_retry
from autooptimize.iceberg.files import partition_dir, partition_path

# Reserved field ids of a position delete file (Iceberg spec, "Position Delete Files").
POS_FILE_PATH_ID = 2147483546
POS_POS_ID = 2147483545
POSITION_DELETE_SCHEMA = Schema(
    NestedField(POS_FILE_PATH_ID, "file_path", StringType(), required=True),
    NestedField(POS_POS_ID, "pos", LongType(), required=True),
)


@dataclass(frozen=True)
class DeleteScope:
    """Where a delete file lives: its spec and partition record (copied from a data file it targets)."""

    spec_id: int
    partition: Any


def scope_of(table: Table, data_path: str) -> DeleteScope:
    """The spec and partition of the live data file ``data_path``."""
    snapshot = table.current_snapshot()
    for manifest in snapshot.manifests(table.io) if snapshot is not None else []:
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if str(entry.data_file.file_path) == data_path and entry.data_file.content == DataFileContent.DATA:
                return DeleteScope(entry.data_file.spec_id, entry.data_file.partition)
    raise InvalidArgument(f"{data_path} is not a live data file of {'.'.join(table.name())}")


def _delete_location(table: Table, scope: DeleteScope, kind: str) -> str:
    location = table.location().rstrip("/")
    data_path = table.properties.get("write.data.path", f"{location}/data").rstrip("/")
    path = partition_path(table.specs()[scope.spec_id], table.schema(), scope.partition)
    return f"{data_path}/{partition_dir(path) + '/' if path else ''}{kind}-delete-{uuid.uuid4()}.parquet"


def _write(table: Table, path: str, data: pa.Table, schema: Schema, full_bounds: bool = False) -> Any:
    with table.io.new_output(path).create(overwrite=False) as stream:
        pq.write_table(data, stream, compression="zstd")
    with table.io.new_input(path).open() as stream:
        metadata = pq.read_metadata(stream)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        # position deletes keep untruncated file_path bounds, as Iceberg's writers do, so planners can
        # tell which data files a delete file may name without reading it
        stats_columns=compute_statistics_plan(
            schema, {**table.metadata.properties, "write.metadata.metrics.default": "full"}
            if full_bounds else table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return statistics, len(table.io.new_input(path))


def _with_spec(data_file: DataFile, spec_id: int) -> DataFile:
    data_file.spec_id = spec_id  # not a field of DataFile.from_args: pyiceberg sets it from the manifest
    return data_file


def write_position_deletes(table: Table, scope: DeleteScope, rows: Iterable[tuple[str, int]]) -> DataFile:
    """Write a position delete file of ``(data file path, row position)`` pairs (sorted, as the spec asks)."""
    ordered = sorted(set(rows))
    if not ordered:
        raise InvalidArgument("a position delete file needs at least one (file_path, pos) row")
    data = pa.Table.from_pylist(
        [{"file_path": p, "pos": int(i)} for p, i in ordered],
        schema=schema_to_pyarrow(POSITION_DELETE_SCHEMA, include_field_ids=True),
    )
    path = _delete_location(table, scope, "pos")
    statistics, size = _write(table, path, data, POSITION_DELETE_SCHEMA, full_bounds=True)
    return _with_spec(DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=scope.partition, file_size_in_bytes=size, sort_order_id=None, spec_id=scope.spec_id,
        equality_ids=None, key_metadata=None, **statistics.to_serialized_dict(),
    ), scope.spec_id)


def write_equality_deletes(table: Table, scope: DeleteScope, columns: Sequence[str],
                           rows: Iterable[dict[str, Any]]) -> DataFile:
    """Write an equality delete file over ``columns`` (by the table's field ids) holding ``rows``."""
    schema = table.schema()
    try:
        fields = [schema.find_field(c) for c in columns]
    except ValueError:
        raise InvalidArgument(
            f"equality columns {list(columns)} must be columns of the table: {[f.name for f in schema.fields]}"
        ) from None
    if not fields:
        raise InvalidArgument("an equality delete file needs at least one equality column")
    delete_schema = Schema(*fields)
    records = [{f.name: r[f.name] for f in fields} for r in rows]
    if not records:
        raise InvalidArgument("an equality delete file needs at least one row")
    data = pa.Table.from_pylist(records, schema=schema_to_pyarrow(delete_schema, include_field_ids=True))
    path = _delete_location(table, scope, "eq")
    statistics, size = _write(table, path, data, delete_schema)
    return _with_spec(DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=scope.partition, file_size_in_bytes=size, sort_order_id=None, spec_id=scope.spec_id,
        equality_ids=[f.field_id for f in fields], key_metadata=None, **statistics.to_serialized_dict(),
    ), scope.spec_id)


def commit_delete_files(table: Table, delete_files: list[DataFile],
                        properties: dict[str, str] | None = None) -> Snapshot:
    """Commit ``delete_files`` in one DELETE snapshot on main (a row delta with deletes only)."""
    if table.metadata.format_version < 2:
        raise InvalidArgument(f"table {'.'.join(table.name())} is format-version 1; row-level deletes need v2")
    if not delete_files or any(f.content == DataFileContent.DATA for f in delete_files):
        raise InvalidArgument("commit_delete_files takes one or more delete files and no data files")
    return apply_with_retry(table, StagedAppend(table, delete_files), properties or {})
