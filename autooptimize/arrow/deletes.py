"""Delete compaction on the pyarrow path: the same job as spark_actors/deletes.py, reading and writing
through the table's FileIO, so it reaches object stores (run as a task of the action's Spark job by
spark_actors/group_tasks.compact_group, or in the worker under the ``local`` engine).

Each data file is read with :func:`autooptimize.arrow.rewrite.scan_files` (in the table's current schema,
every row in file order, so a row's position is its index in the file; the next files read ahead). Then, as in Iceberg's spec
("Scan Planning"):

* a position delete removes the rows at its positions of the files it names, when its data sequence
  number is >= the data file's. Paths are compared after :func:`autooptimize.engines.deletes.join_key`;
* an equality delete removes the rows whose key columns equal one of its rows, null equal to null,
  when its data sequence number is strictly greater than the data file's. Its columns are read by
  field id and cast to the data's types.

The rows read and the digest of the rows kept are measured in the same pass; the caller reads the
outputs back with another reader and compares, exactly as for the Spark job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from autooptimize.arrow.lineage import lineage_columns, with_lineage
from autooptimize.arrow.rewrite import check_outputs, check_writable, scan_files
from autooptimize.arrow.writers import Writers, write_rolling
from autooptimize.domain.cancel import raise_if_stopped
from autooptimize.engines.deletes import (
    LOCAL_SCHEME,
    CompactionOutput,
    SequencedFile,
    equality_fields,
    join_key,
)
from autooptimize.engines.digest import DigestAccumulator
from autooptimize.errors import ActionRefused, VerificationFailed
from autooptimize.iceberg.v3 import LAST_UPDATED, ROW_ID, MalformedDeleteFile, vector_positions

FIELD_ID = b"PARQUET:field_id"
_ROW = "_ao_row"


@dataclass(frozen=True)
class _EqualityDeletes:
    """The key rows of one set of equality field ids, with each row's data sequence number."""

    names: list[str]  # the data's column names of the key fields
    keys: pa.Table  # null-safe key columns (see _null_safe) and _ao_seq


def _zero(value_type: pa.DataType) -> Any:
    """Any non-null value of ``value_type``: stands in for null in a key (a null flag column beside it
    keeps null and this value apart)."""
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        return pa.scalar("", value_type)
    if pa.types.is_fixed_size_binary(value_type):
        return pa.scalar(bytes(value_type.byte_width), value_type)
    if pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        return pa.scalar(b"", value_type)
    if pa.types.is_boolean(value_type):
        return pa.scalar(False)
    if pa.types.is_decimal(value_type):
        return pa.scalar(Decimal(0), value_type)
    for source in (pa.int32(), pa.int64()):
        try:
            return pa.array([0], source).cast(value_type)[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    raise ActionRefused("unsupported_equality_field", f"equality deletes on a {value_type} column are not supported")


def _null_safe(columns: list[pa.ChunkedArray | pa.Array], types: list[pa.DataType]) -> dict[str, Any]:
    """Key columns that join null to null: per column, a null flag and the value with nulls filled."""
    out: dict[str, Any] = {}
    for i, (column, value_type) in enumerate(zip(columns, types, strict=True)):
        column = column.cast(value_type)
        out[f"_ao_n{i}"] = pc.is_null(column)
        out[f"_ao_v{i}"] = pc.fill_null(column, _zero(value_type)) if column.null_count else column
    return out


def _read_by_ids(table: Table, path: str, ids: list[int]) -> pa.Table:
    """The columns of ``path`` with the field ids ``ids``, in that order."""
    with table.io.new_input(path).open() as stream:
        data = pq.read_table(stream)
    by_id = {int(f.metadata[FIELD_ID]): f.name for f in data.schema if f.metadata and FIELD_ID in f.metadata}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ActionRefused("malformed_delete_file", f"delete file {path} has no column with field id {missing[0]}")
    return pa.table({str(i): data.column(by_id[i]) for i in ids})


def _equality_deletes(table: Table, ids: tuple[int, ...], deletes: list[SequencedFile],
                      types: dict[str, pa.DataType]) -> _EqualityDeletes:
    fields = equality_fields(table.schema(), ids)
    names = [f.name for f in fields]
    parts = []
    for d in deletes:
        raw = _read_by_ids(table, d.path, list(ids))
        keys = _null_safe(raw.columns, [types[n] for n in names])
        keys["_ao_seq"] = pa.array(np.full(raw.num_rows, d.sequence_number, dtype=np.int64))
        parts.append(pa.table(keys))
    return _EqualityDeletes(names, pa.concat_tables(parts))


def _position_deletes(table: Table, deletes: list[SequencedFile]) -> pa.Table:
    """(file key, pos, sequence number) of every position delete; keys normalised as :func:`join_key`."""
    parts = []
    for d in deletes:
        if d.content_offset is not None:  # a deletion vector: one blob of a Puffin file (Iceberg v3)
            try:
                referenced, found = vector_positions(table.io, d.path, d.content_offset)
            except MalformedDeleteFile as exc:
                raise ActionRefused("malformed_delete_file", str(exc)) from None
            data = pa.table({"file_path": pa.array([referenced] * len(found), pa.string()),
                             "pos": pa.array(found, pa.int64())})
        else:
            with table.io.new_input(d.path).open() as stream:
                data = pq.read_table(stream, columns=["file_path", "pos"])
        if data.column("file_path").null_count or data.column("pos").null_count:
            raise ActionRefused("malformed_delete_file", f"position delete file {d.path} has null values")
        key = pc.replace_substring_regex(data.column("file_path"), pattern=LOCAL_SCHEME, replacement="/")
        parts.append(pa.table({"key": key, "pos": data.column("pos").cast(pa.int64()),
                               "seq": pa.array(np.full(data.num_rows, d.sequence_number, dtype=np.int64))}))
    return pa.concat_tables(parts) if parts else pa.table({"key": pa.array([], pa.string()),
                                                           "pos": pa.array([], pa.int64()),
                                                           "seq": pa.array([], pa.int64())})


def _deleted_positions(positions: pa.Table, data: SequencedFile) -> np.ndarray:
    """Sorted distinct positions of ``data`` that apply under the sequence rule."""
    if not positions.num_rows:
        return np.array([], np.int64)
    mine = pc.and_(pc.equal(positions.column("key"), join_key(data.path)),
                   pc.greater_equal(positions.column("seq"), data.sequence_number))
    return np.unique(positions.column("pos").filter(mine).to_numpy())


def _drop_equal(batch: pa.Table, eq: _EqualityDeletes, sequence_number: int) -> pa.Table:
    """``batch`` without the rows an applicable equality delete matches."""
    applicable = eq.keys.filter(pc.greater(eq.keys.column("_ao_seq"), sequence_number)).drop_columns(["_ao_seq"])
    if not applicable.num_rows or not batch.num_rows:
        return batch
    types = [applicable.column(f"_ao_v{i}").type for i in range(len(eq.names))]
    left = pa.table(_null_safe([batch.column(n) for n in eq.names], types))
    left = left.append_column(_ROW, pa.array(np.arange(batch.num_rows, dtype=np.int64)))
    keys = [c for c in applicable.column_names]
    survivors = left.join(applicable.group_by(keys).aggregate([]), keys=keys, join_type="left anti")
    return batch.take(pa.array(np.sort(survivors.column(_ROW).to_numpy())))


def compact_group_arrow(table: Table, data_files: list[tuple[DataFile, int]], deletes: list[SequencedFile],
                        output_dir: str, files_out: int, codec: str = "zstd",
                        partition: tuple[int, Any] | None = None) -> CompactionOutput:
    """Rewrite ``data_files`` (each with its data sequence number) with ``deletes`` applied into about
    ``files_out`` files under ``output_dir`` (which must not exist), in the inputs' ``partition``."""
    schema = check_writable(table, output_dir)
    assert partition is not None
    # a v3 table's rows keep their lineage: both columns materialised into the outputs (arrow/lineage.py)
    lineage = table.metadata.format_version >= 3
    data_names = [f.name for f in schema.fields]
    written_schema = with_lineage(schema) if lineage else schema
    arrow_schema = schema_to_pyarrow(written_schema, include_field_ids=True)
    types = {f.name: f.type for f in schema_to_pyarrow(schema, include_field_ids=False)}
    positions = _position_deletes(table, [d for d in deletes if d.equality_ids is None])
    by_ids: dict[tuple[int, ...], list[SequencedFile]] = {}
    for d in deletes:
        if d.equality_ids is not None:
            by_ids.setdefault(tuple(d.equality_ids), []).append(d)
    equality = [_equality_deletes(table, ids, group, types) for ids, group in sorted(by_ids.items())]
    rows_in = sum(int(f.record_count) for f, _ in data_files)
    rows_per_file = max(1, math.ceil(rows_in / max(1, files_out)))
    writers = Writers(table, arrow_schema, codec, iceberg_schema=written_schema)
    kept = DigestAccumulator()
    kept_lineage = DigestAccumulator()
    rows_read = 0
    with writers:  # a failure closes the open files and is raised as it was
        read = scan_files(table, [f for f, _ in data_files])  # read ahead across files, each in file order
        for (data_file, seq), (_, batches) in zip(data_files, read, strict=True):
            raise_if_stopped(output_dir)
            gone = _deleted_positions(positions, SequencedFile(str(data_file.file_path), seq))
            if lineage:
                row_ids, updated = lineage_columns(table.io, data_file, seq)
            offset = 0
            for batch in batches:
                piece = pa.Table.from_batches([batch])
                if lineage:
                    piece = piece.append_column(ROW_ID, row_ids.slice(offset, batch.num_rows)).append_column(
                        LAST_UPDATED, updated.slice(offset, batch.num_rows))
                if len(gone):
                    index = np.arange(offset, offset + batch.num_rows, dtype=np.int64)
                    piece = piece.filter(pa.array(~np.isin(index, gone, assume_unique=True)))
                offset += batch.num_rows
                for eq in equality:
                    piece = _drop_equal(piece, eq, seq)
                for chunk in piece.to_batches():
                    if chunk.num_rows:
                        kept.add(chunk.select(data_names) if lineage else chunk)
                        if lineage:
                            kept_lineage.add(chunk)
                        write_rolling(writers, output_dir, chunk, rows_per_file, partition)
            if offset != int(data_file.record_count):
                raise VerificationFailed(f"read {offset} rows of {data_file.file_path}, whose metadata says "
                                         f"{data_file.record_count}")
            rows_read += offset
    written = writers.close()
    paths = [w.path for w in written]
    check_outputs(table, paths, written_schema)
    return CompactionOutput(paths=tuple(paths), rows_read=rows_read, digest_kept=kept.digest,
                            lineage_kept=kept_lineage.digest if lineage else None)
