"""The pyarrow rewrite path: pyiceberg's own reader in, a pyarrow writer with field ids out.

Used only for the groups Spark cannot rewrite faithfully (measured on pyspark 4.3, Spark Connect):

* uuid: Spark fails to read ``FIXED_LEN_BYTE_ARRAY(16) (UUID)`` ("Illegal Parquet type"); read as
  binary it writes ``BINARY``, which is not Iceberg's uuid.
* fixed[L]: written as ``BINARY`` instead of ``FIXED_LEN_BYTE_ARRAY(L)``.
* list and map: Spark writes the list's field id but ``field_id=-1`` on the element, key and value,
  and pyiceberg then refuses the file ("Parquet file does not have field-ids ...").
* files without field ids (``add_files`` under a name mapping): pyiceberg's reader applies the
  table's name mapping exactly (aliases, nested fields), so these are read by name here, in their
  own group, and written back with field ids.
* rewriting older-spec files into the current spec: the partition of every row is computed by
  pyiceberg's transforms (the same code pyiceberg's writer uses; bucket is Iceberg's murmur3 from
  pyiceberg-core, which Spark's ``hash`` is not).

Reading goes through ``ArrowScan`` (projection by field id or name mapping, type promotion, NULL for
added columns, dropped columns left out); batches stream to rolling writers, so memory holds a batch,
not the group. Verification is the same as on the Spark path: rows and an order-independent content
checksum of the inputs (observed while writing) must equal those of the outputs read back through
pyiceberg, and each output must hold the table's schema with its field ids and physical types.
The checksum hashes a canonical form of every row in Python: slower than Spark's, acceptable for the
groups that need this path.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import (
    ArrowScan,
    _determine_partitions,
    _get_parquet_writer_kwargs,
    _to_requested_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import FileScanTask, Table
from pyiceberg.typedef import Record

from autooptimize.errors import ActionRefused, VerificationFailed
from spark_actors.types import output_schema_problem, unsupported_reason


@dataclass
class _Digest:
    rows: int = 0
    h1: int = 0
    h2: int = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        types = [f.type for f in batch.schema]
        columns = [c.to_pylist() for c in batch.columns]
        for row in zip(*columns, strict=True) if columns else ():
            canon = repr(tuple(_canonical(v, t) for v, t in zip(row, types, strict=True))).encode()
            digest = hashlib.blake2b(canon, digest_size=16).digest()
            self.h1 += int.from_bytes(digest[:8], "big")
            self.h2 += int.from_bytes(digest[8:], "big")
        self.rows += batch.num_rows

    @property
    def checksum(self) -> str:
        return f"{self.rows}:{self.h1:x}:{self.h2:x}"


def _canonical(value: Any, t: pa.DataType) -> Any:
    """A value whose repr is the same for equal values whatever the order of map entries."""
    if value is None:
        return None
    if isinstance(t, pa.ExtensionType):
        return _canonical(value, t.storage_type) if not isinstance(value, uuid.UUID) else value.bytes
    if pa.types.is_map(t):
        entries = [(_canonical(k, t.key_type), _canonical(v, t.item_type)) for k, v in value]
        return ("map", tuple(sorted(entries, key=repr)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ("list", tuple(_canonical(v, t.value_type) for v in value))
    if pa.types.is_struct(t):
        return ("struct", tuple(_canonical(value.get(f.name), f.type) for f in t))
    if isinstance(value, float) and math.isnan(value):
        return "NaN"  # every NaN payload is one value, as in Spark's hash of a double
    return value


@dataclass(frozen=True)
class ArrowOutput:
    """Output files with the (spec id, partition record) each belongs to."""

    paths: tuple[str, ...]
    partitions: tuple[tuple[int, Record], ...]
    rows_in: int
    checksum_in: str
    rows_out: int
    checksum_out: str


@dataclass
class _Writer:
    path: str
    stream: Any
    writer: pq.ParquetWriter
    partition: tuple[int, Record]
    rows: int = 0


@dataclass
class _Writers:
    table: Table
    schema: pa.Schema
    codec: str
    open: dict[str, _Writer] = field(default_factory=dict)
    done: list[_Writer] = field(default_factory=list)

    def get(self, directory: str, partition: tuple[int, Record]) -> _Writer:
        current = self.open.get(directory)
        if current is None:
            path = f"{directory}/part-{len(self.done) + len(self.open):05d}-{uuid.uuid4()}.parquet"
            stream = self.table.io.new_output(path).create(overwrite=False)
            kwargs = _get_parquet_writer_kwargs(self.table.properties) | {"compression": self.codec}
            current = _Writer(path, stream, pq.ParquetWriter(stream, schema=self.schema, **kwargs), partition)
            self.open[directory] = current
        return current

    def roll(self, directory: str) -> None:
        current = self.open.pop(directory, None)
        if current is not None:
            current.writer.close()
            current.stream.close()
            self.done.append(current)

    def close(self) -> list[_Writer]:
        for directory in list(self.open):
            self.roll(directory)
        return self.done


def _tasks(files: list[DataFile]) -> list[FileScanTask]:
    return [FileScanTask(f) for f in files]


def scan(table: Table, files: list[DataFile]) -> Iterator[pa.RecordBatch]:
    """The rows of ``files`` as pyiceberg reads them in the table's current schema."""
    arrow_scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue(), case_sensitive=True)
    yield from arrow_scan.to_record_batches(_tasks(files))


def _plain_data_file(table: Table, path: str, partition: tuple[int, Record]) -> DataFile:
    """Just enough of a DataFile for ArrowScan to read a file back (no statistics)."""
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition[1],
        record_count=0, file_size_in_bytes=len(table.io.new_input(path)),
    )
    data_file.spec_id = partition[0]
    return data_file


def _is_empty_dir(table: Table, directory: str) -> bool:
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(directory)
    return fs.get_file_info(root).type == pafs.FileType.NotFound


def rewrite_group_arrow(
    table: Table,
    inputs: list[DataFile],
    output_dir: str,
    files_out: int,
    codec: str = "zstd",
    spec: PartitionSpec | None = None,
    input_partition: tuple[int, Record] | None = None,
) -> ArrowOutput:
    """Rewrite ``inputs`` under ``output_dir`` (which must not exist) and verify the result.

    Without ``spec`` the rows keep the inputs' partition (``input_partition``) and are spread over
    about ``files_out`` files. With ``spec`` every row goes to its partition under ``spec`` (one
    sub-directory and one file per partition met), and each output records that partition.
    """
    schema = table.schema()
    reason = unsupported_reason(schema)
    if reason is not None:
        raise ActionRefused("unsupported_type", reason)
    if not _is_empty_dir(table, output_dir):
        raise VerificationFailed(f"output directory {output_dir} already exists")
    if spec is None and input_partition is None:
        raise ValueError("rewrite_group_arrow needs the inputs' partition or a spec to partition by")
    arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
    expected_rows = sum(int(f.record_count) for f in inputs)
    rows_per_file = max(1, math.ceil(expected_rows / max(1, files_out)))
    writers = _Writers(table, arrow_schema, codec)
    digest_in = _Digest()
    try:
        for batch in scan(table, inputs):
            digest_in.add(batch)
            if spec is None:
                assert input_partition is not None
                _write_rolling(writers, output_dir, batch, rows_per_file, input_partition)
            else:
                for part in _determine_partitions(spec, schema, pa.Table.from_batches([batch])):
                    directory = f"{output_dir}/{part.partition_key.to_path()}" if spec.fields else output_dir
                    partition = (spec.spec_id, part.partition_key.partition)
                    for chunk in part.arrow_table_partition.to_batches():
                        _write(writers.get(directory, partition), schema, chunk)
    finally:
        written = writers.close()
    paths = [w.path for w in written]
    for path in paths:
        problem = output_schema_problem(schema, path, table.io)
        if problem is not None:
            raise VerificationFailed(problem)
    rows_out, checksum_out = digest_files(table, paths, [w.partition for w in written])
    return ArrowOutput(
        paths=tuple(paths),
        partitions=tuple(w.partition for w in written),
        rows_in=digest_in.rows, checksum_in=digest_in.checksum,
        rows_out=rows_out, checksum_out=checksum_out,
    )


def _write(writer: _Writer, schema: Any, batch: pa.RecordBatch) -> None:
    if batch.num_rows == 0:
        return
    # pyiceberg's own write-side conversion: field ids, required-ness and physical types of the schema
    converted = _to_requested_schema(schema, schema, batch, include_field_ids=True,
                                     format_model=FileFormatFactory.get(FileFormat.PARQUET))
    # one file schema for every batch (files of a group may read as string and large_string)
    writer.writer.write_batch(converted.cast(writer.writer.schema))
    writer.rows += batch.num_rows


def _write_rolling(writers: _Writers, directory: str, batch: pa.RecordBatch, rows_per_file: int,
                   partition: tuple[int, Record]) -> None:
    schema = writers.table.schema()
    offset = 0
    while offset < batch.num_rows:
        writer = writers.get(directory, partition)
        take = min(rows_per_file - writer.rows, batch.num_rows - offset)
        _write(writer, schema, batch.slice(offset, take))
        offset += take
        if writer.rows >= rows_per_file:
            writers.roll(directory)


def read_back(table: Table, paths: list[str], partitions: list[tuple[int, Record]]) -> pa.Table:
    """Output files (with the partition each is recorded under) as pyiceberg reads them."""
    batches = list(scan(table, [_plain_data_file(table, p, q) for p, q in zip(paths, partitions, strict=True)]))
    return pa.Table.from_batches(batches) if batches else schema_to_pyarrow(table.schema()).empty_table()


def digest_files(table: Table, paths: list[str], partitions: list[tuple[int, Record]]) -> tuple[int, str]:
    """Rows and content checksum of files read back through pyiceberg (as the rewrite measures them)."""
    digest = _Digest()
    for batch in scan(table, [_plain_data_file(table, p, q) for p, q in zip(paths, partitions, strict=True)]):
        digest.add(batch)
    return digest.rows, digest.checksum
