"""The pyarrow rewrite path: pyiceberg's own reader in, a pyarrow writer with field ids out.

Every group of the default engine runs it, as a task on a Spark executor (spark_actors/group_tasks.py);
the ``local`` engine runs it in the worker. It rewrites faithfully what Spark's own Parquet IO (the
``spark_sql`` engine) cannot (measured on pyspark 4.3, Spark Connect):

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
checksum of the inputs (observed while writing) must equal those of the outputs, read back by the
caller with another reader (plain pyarrow by field id), and each output must hold the table's schema
with its field ids and physical types.
The checksum is the one content digest of autooptimize/engines/digest.py (the same definition as
the Spark path's, computed with pyarrow and numpy).
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import FileScanTask, Table
from pyiceberg.typedef import Record

from autooptimize.domain.cancel import raise_if_stopped
from autooptimize.engines.digest import DigestAccumulator
from autooptimize.errors import ActionRefused, VerificationFailed
from autooptimize.iceberg.fileio import exists, list_files
from spark_actors.arrow_sort import SortKey, sorted_slices
from spark_actors.types import output_schema_problem, unsupported_reason
from spark_actors.zorder_arrow import zorder_slices


@dataclass(frozen=True)
class ArrowOutput:
    """Output files with the (spec id, partition record) each belongs to."""

    paths: tuple[str, ...]
    partitions: tuple[tuple[int, Record], ...]
    rows_in: int
    checksum_in: str


ROW_GROUP_ROWS = 1_048_576  # pyiceberg's write.parquet.row-group-limit default
ROW_GROUP_BYTES = 128 * 1024 * 1024  # in memory; Iceberg's write.parquet.row-group-size-bytes default


@dataclass
class _Writer:
    """One output file. Batches (as read, of one Arrow schema) are held until a row group's worth has
    come, then converted and written at once: written one by one, the batches of small inputs made a
    row group each (125 row groups in a 25 MB file), and converting each cost more than the write."""

    path: str
    stream: Any
    arrow_schema: pa.Schema  # with field ids
    kwargs: dict[str, Any]  # the table's Parquet writer properties
    partition: tuple[int, Record]
    schema: Any  # the Iceberg schema written
    row_group_rows: int = ROW_GROUP_ROWS
    writer: pq.ParquetWriter | None = None  # opened at the first row group, when the data is known
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0
    bytes_per_row: float = 0.0  # of the first batch held, to bound what is held by bytes too

    def add(self, batch: pa.RecordBatch) -> None:
        if self.pending and not batch.schema.equals(self.pending[0].schema):
            self.flush()  # files of a group may read as string and as large_string: one schema per concat
        if not self.bytes_per_row:
            self.bytes_per_row = max(1.0, batch.nbytes / max(1, batch.num_rows))
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.rows += batch.num_rows
        if self.pending_rows >= self.row_group_rows or self.pending_rows * self.bytes_per_row >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            held = pa.Table.from_batches(self.pending).combine_chunks()
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.stream, schema=self.arrow_schema,
                                               use_dictionary=dictionary_columns(held), **self.kwargs)
            for batch in held.to_batches():
                # pyiceberg's own write-side conversion: field ids, required-ness and physical types
                converted = _to_requested_schema(self.schema, self.schema, batch, include_field_ids=True,
                                                 format_model=FileFormatFactory.get(FileFormat.PARQUET))
                self.writer.write_table(pa.Table.from_batches([converted.cast(self.arrow_schema)]),
                                        row_group_size=self.row_group_rows)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self.flush()
        if self.writer is None:  # no row came: still a valid (empty) Parquet file
            self.writer = pq.ParquetWriter(self.stream, schema=self.arrow_schema, **self.kwargs)
        self.writer.close()
        self.stream.close()


#: A column whose first row group has more distinct values than this share of its rows is written
#: without a dictionary: pyarrow keeps a dictionary up to its page limit whatever it saves, and for
#: near-unique values (ids, payloads) that made files 3× larger than plain encoding (Spark's writer
#: falls back to plain when the dictionary does not pay).
DICTIONARY_MAX_DISTINCT_SHARE = 0.3
DICTIONARY_SAMPLE_ROWS = 16_384  # judged on this many rows of the first row group


def dictionary_columns(data: pa.Table) -> list[str] | bool:
    """The top-level columns worth a dictionary in ``data``, judged on its first rows (nested ones keep
    it); True: all of them."""
    import pyarrow.compute as pc

    sample = data.slice(0, DICTIONARY_SAMPLE_ROWS)  # counting every distinct value cost more than the write
    rows = max(1, sample.num_rows)
    keep: list[str] = []
    for name, column in zip(sample.column_names, sample.columns, strict=True):
        if pa.types.is_nested(column.type):
            keep.append(name)
            continue
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            keep.append(name)
            continue
        if distinct <= DICTIONARY_MAX_DISTINCT_SHARE * rows:
            keep.append(name)
    return True if len(keep) == data.num_columns else keep


@dataclass
class _Writers:
    table: Table
    schema: pa.Schema
    codec: str
    open: dict[str, _Writer] = field(default_factory=dict)
    done: list[_Writer] = field(default_factory=list)
    iceberg_schema: Any = None  # what the files hold when not the table's schema (v3: with row lineage)

    def get(self, directory: str, partition: tuple[int, Record]) -> _Writer:
        current = self.open.get(directory)
        if current is None:
            path = f"{directory}/part-{len(self.done) + len(self.open):05d}-{uuid.uuid4()}.parquet"
            stream = self.table.io.new_output(path).create(overwrite=False)
            kwargs = _get_parquet_writer_kwargs(self.table.properties) | {"compression": self.codec}
            limit = int(self.table.properties.get("write.parquet.row-group-limit", ROW_GROUP_ROWS))
            current = _Writer(path, stream, self.schema, kwargs, partition, self.iceberg_schema or self.table.schema(),
                              row_group_rows=max(1, limit))
            self.open[directory] = current
        return current

    def roll(self, directory: str) -> None:
        current = self.open.pop(directory, None)
        if current is not None:
            current.close()
            self.done.append(current)

    def close(self) -> list[_Writer]:
        for directory in list(self.open):
            self.roll(directory)
        return self.done


#: Files read ahead, in threads, while the caller consumes the current one (bounded in bytes as well).
READ_AHEAD_FILES = 8
READ_AHEAD_BYTES = 256 << 20


def scan(table: Table, files: list[DataFile]) -> Iterator[pa.RecordBatch]:
    """The rows of ``files``, file after file, as pyiceberg reads them in the table's current schema
    (see :func:`scan_files`)."""
    for _, batches in scan_files(table, files):
        yield from batches


def scan_files(table: Table, files: list[DataFile]) -> Iterator[tuple[DataFile, list[pa.RecordBatch]]]:
    """Each of ``files`` in order with its rows, every row in file order, as pyiceberg reads them in the
    table's current schema.

    A file whose top-level columns are exactly the table's (names, field ids and types: every file this
    service or pyiceberg wrote since the last schema change) is read directly with pyarrow, which spares
    pyiceberg's per-file projection (``benchmarks.merge``: 125 files of 23 MB in 0.15 s instead of
    0.32 s). Any other file (an older schema, nested columns, a file without field ids) goes through
    pyiceberg's ``ArrowScan``, which maps it by field id. Up to :data:`READ_AHEAD_FILES` files (and
    :data:`READ_AHEAD_BYTES`) are read ahead in threads, as ArrowScan reads its tasks concurrently."""
    expected = schema_to_pyarrow(table.schema(), include_field_ids=True)
    plain = pa.schema([f.remove_metadata() for f in expected])

    def read(data_file: DataFile) -> list[pa.RecordBatch] | None:
        with table.io.new_input(data_file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream)
            if not _same_columns(parquet.schema_arrow, expected):
                return None
            # the table's types, no field metadata (as ArrowScan gives); a null in a required column fails
            # here rather than being written on
            return [batch for group in range(parquet.num_row_groups)
                    for batch in parquet.read_row_group(group).cast(plain).to_batches()]

    arrow_scan: ArrowScan | None = None
    remaining = iter(files)
    ahead: deque[tuple[DataFile, Future[list[pa.RecordBatch] | None]]] = deque()
    ahead_bytes = 0
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ao-read") as pool:
        while True:
            while len(ahead) < READ_AHEAD_FILES and (not ahead or ahead_bytes < READ_AHEAD_BYTES):
                data_file = next(remaining, None)
                if data_file is None:
                    break
                ahead.append((data_file, pool.submit(read, data_file)))
                ahead_bytes += int(data_file.file_size_in_bytes)
            if not ahead:
                return
            data_file, future = ahead.popleft()
            ahead_bytes -= int(data_file.file_size_in_bytes)
            batches = future.result()
            if batches is None:
                if arrow_scan is None:
                    arrow_scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue(),
                                           case_sensitive=True)
                batches = list(arrow_scan.to_record_batches([FileScanTask(data_file)]))
            yield data_file, batches


_WIDE = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}


def _same_columns(found: pa.Schema, expected: pa.Schema) -> bool:
    """True when ``found`` has ``expected``'s top-level columns in order (names, field ids and types, where
    ``string``/``binary`` stand for the ``large_`` types); a nested column always goes to ArrowScan."""
    if len(found) != len(expected):
        return False
    for have, want in zip(found, expected, strict=True):
        if pa.types.is_nested(want.type) or have.name != want.name:
            return False
        if (have.metadata or {}).get(b"PARQUET:field_id") != (want.metadata or {}).get(b"PARQUET:field_id"):
            return False
        if have.type != want.type and _WIDE.get(have.type) != want.type:
            return False
    return True


def _is_empty_dir(table: Table, directory: str) -> bool:
    return not exists(table.io, directory) and not list_files(table.io, directory)


def check_writable(table: Table, output_dir: str) -> Any:
    """The table's schema, once the pyarrow path can write its types and ``output_dir`` does not exist yet
    (ActionRefused, VerificationFailed)."""
    schema = table.schema()
    reason = unsupported_reason(schema)
    if reason is not None:
        raise ActionRefused("unsupported_type", reason)
    if not _is_empty_dir(table, output_dir):
        raise VerificationFailed(f"output directory {output_dir} already exists")
    return schema


def rewrite_group_arrow(
    table: Table,
    inputs: list[DataFile],
    output_dir: str,
    files_out: int,
    codec: str = "zstd",
    spec: PartitionSpec | None = None,
    input_partition: tuple[int, Record] | None = None,
    sort: list[SortKey] | None = None,
    zorder: list[Any] | None = None,
) -> ArrowOutput:
    """Rewrite ``inputs`` under ``output_dir`` (which must not exist) and verify the result.

    Without ``spec`` the rows keep the inputs' partition (``input_partition``) and are spread over
    about ``files_out`` files. With ``spec`` every row goes to its partition under ``spec`` (one
    sub-directory and one file per partition met), and each output records that partition. With
    ``sort`` (no ``spec``) the group is sorted in memory and cut into files of disjoint ranges of the
    first key (spark_actors/arrow_sort.py). With ``zorder`` (ZKeys; no ``spec``) it is ordered by the
    z-value and cut into files of disjoint z ranges (spark_actors/zorder_arrow.py).
    """
    schema = check_writable(table, output_dir)
    if spec is None and input_partition is None:
        raise ValueError("rewrite_group_arrow needs the inputs' partition or a spec to partition by")
    if (sort or zorder) and spec is not None:
        raise ValueError("rewrite_group_arrow sorts within one partition: give sort or spec, not both")
    ordered = bool(sort or zorder)
    arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
    expected_rows = sum(int(f.record_count) for f in inputs)
    rows_per_file = max(1, math.ceil(expected_rows / max(1, files_out)))
    writers = _Writers(table, arrow_schema, codec)
    digest_in = DigestAccumulator()
    held: list[pa.Table] = []  # a sort needs the whole group
    try:
        for batch in scan(table, inputs):
            raise_if_stopped(output_dir)  # an attempt stopped from outside ends here (domain/cancel.py)
            digest_in.add(batch)
            if ordered:
                held.append(pa.Table.from_batches([batch]))
            elif spec is None:
                assert input_partition is not None
                _write_rolling(writers, output_dir, batch, rows_per_file, input_partition)
            else:
                for part in _determine_partitions(spec, schema, pa.Table.from_batches([batch])):
                    directory = f"{output_dir}/{part.partition_key.to_path()}" if spec.fields else output_dir
                    partition = (spec.spec_id, part.partition_key.partition)
                    for chunk in part.arrow_table_partition.to_batches():
                        _write(writers.get(directory, partition), schema, chunk)
        if ordered:
            assert input_partition is not None
            data = pa.concat_tables(held, promote_options="permissive") if held else arrow_schema.empty_table()
            held.clear()
            pieces = zorder_slices(data, zorder, files_out) if zorder else sorted_slices(data, sort or [], files_out)
            for piece in pieces:
                for chunk in piece.to_batches():
                    _write(writers.get(output_dir, input_partition), schema, chunk)
                writers.roll(output_dir)
    finally:
        written = writers.close()
    paths = [w.path for w in written]
    check_outputs(table, paths)
    return ArrowOutput(
        paths=tuple(paths),
        partitions=tuple(w.partition for w in written),
        rows_in=digest_in.rows, checksum_in=digest_in.digest.checksum,
    )


def check_outputs(table: Table, paths: list[str], schema: Any = None) -> None:
    """VerificationFailed unless every output holds the table's schema (or ``schema``) with its field ids
    and types."""
    for path in paths:
        problem = output_schema_problem(schema or table.schema(), path, table.io)
        if problem is not None:
            raise VerificationFailed(problem)


def _write(writer: _Writer, schema: Any, batch: pa.RecordBatch) -> None:
    if batch.num_rows == 0:
        return
    writer.add(batch)  # converted to the file's schema as a row group is written (_Writer.flush)


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
